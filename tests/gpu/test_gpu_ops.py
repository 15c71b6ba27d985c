"""The operations on CUDA tensors, in a launched worker (the test process never touches CUDA)."""

from __future__ import annotations

import pytest
import torch

from notebook_launcher import PartialState, notebook_launcher, ops
from notebook_launcher.utils.environment import cuda_device_count

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(cuda_device_count() == 0, reason="needs a CUDA GPU"),
]


def on_the_gpu(folder):
    state = PartialState()
    device = state.device
    batch = {"x": torch.ones(2, 3).pin_memory(), "ids": [torch.arange(4)], "name": "b"}
    moved = ops.send_to_device(batch, device, non_blocking=True, skip_keys="ids")
    torch.cuda.synchronize()
    half = ops.convert_to_fp32({"h": torch.ones(2, device=device, dtype=torch.float16)})
    ops.set_seed(11)
    first = torch.rand(3, device=device)
    ops.set_seed(11)
    second = torch.rand(3, device=device)
    ops.synchronize_rng_state("cuda")
    ops.synchronize_rng_states(["torch", "cuda"])
    data = {"a": torch.ones(2, device=device), "b": torch.tensor(3, device=device)}
    ops.offload_state_dict(folder, data)
    ops.save(data, f"{folder}/data.safetensors", safe_serialization=True)
    return {
        "device": str(device),
        "moved": (moved["x"].device.type, moved["ids"][0].device.type, moved["name"]),
        "fp32": half["h"].dtype,
        "seeded": torch.equal(first, second),
        "gather": ops.gather(data)["a"].device.type,
        "reduce": ops.reduce(data, "sum")["b"].item(),
        "pad": ops.pad_across_processes(data)["a"].shape,
        "listify": ops.listify(data),
    }


def test_operations_on_cuda_tensors(tmp_path):
    out = notebook_launcher(on_the_gpu, args=(str(tmp_path),), num_processes=1).main
    assert out["device"].startswith("cuda")
    assert out["moved"] == ("cuda", "cpu", "b")
    assert out["fp32"] == torch.float32 and out["seeded"]
    assert out["gather"] == "cuda" and out["reduce"] == 3 and out["pad"] == (2,)
    assert out["listify"] == {"a": [1.0, 1.0], "b": 3}
    assert (tmp_path / "index.json").exists() and (tmp_path / "data.safetensors").exists()
