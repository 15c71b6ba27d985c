"""save_state / load_state with CUDA tensors: back on the GPU in a new job, and on a CPU-only
machine (an interpreter that sees no GPU); save_model from the GPU read on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import torch
from gpu_support import NEEDS_GPU, make_loader, make_model
from safetensors.torch import load_file

from notebook_launcher import (
    Accelerator,
    DataLoaderConfiguration,
    GradScalerKwargs,
    notebook_launcher,
)

pytestmark = NEEDS_GPU


def _objects(precision):
    # A scale at which no step overflows, so that every step counts (and the scheduler moves).
    scaler = GradScalerKwargs(init_scale=256.0)
    accelerator = Accelerator(
        mixed_precision=precision,
        kwargs_handlers=[scaler],
        # The loader's position is saved and resumed (without it, as in Accelerate, it is not).
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = make_loader()
    return accelerator, *accelerator.prepare(model, optimizer, scheduler, loader)


def _cpu_copy(model, optimizer):
    return {
        "weights": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "exp_avg": [s["exp_avg"].detach().cpu().clone() for s in optimizer.state.values()],
    }


def train_and_save(folder):
    accelerator, model, optimizer, scheduler, loader = _objects("fp16")
    for step, (x, y) in enumerate(loader):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step == 3:  # saved inside the epoch: the checkpoint records the loader's position
            accelerator.save_state(folder)
            break
    expected = _cpu_copy(model, optimizer)
    torch.save(expected, os.path.join(folder, "expected.pt"))
    accelerator.save_model(model, os.path.join(folder, "exported"))
    return {
        "devices": sorted(
            {str(v.device) for s in optimizer.state.values() for v in s.values() if v.dim() > 0}
        ),
        "scale": float(accelerator.scaler.get_scale()),
        "lr": scheduler.get_last_lr()[0],
    }


def load_on_the_gpu(folder):
    accelerator, model, optimizer, scheduler, loader = _objects("fp16")
    accelerator.load_state(folder)
    loaded = _cpu_copy(model, optimizer)
    expected = torch.load(os.path.join(folder, "expected.pt"))
    x, _ = next(iter(loader))  # resumes after the 4 batches seen before the save
    return {
        "same_weights": all(
            torch.equal(loaded["weights"][k], v) for k, v in expected["weights"].items()
        ),
        "same_state": all(
            torch.equal(a, b) for a, b in zip(loaded["exp_avg"], expected["exp_avg"], strict=True)
        ),
        "devices": sorted(
            {str(v.device) for s in optimizer.state.values() for v in s.values() if v.dim() > 0}
        ),
        "weight_devices": sorted({str(p.device) for p in model.parameters()}),
        "scale": float(accelerator.scaler.get_scale()),
        "lr": scheduler.get_last_lr()[0],
        "x": x.cpu(),
    }


def test_save_state_with_cuda_tensors_and_load_state_in_a_new_job(tmp_path):
    folder = str(tmp_path / "checkpoint")
    saved = notebook_launcher(train_and_save, args=(folder,), num_processes=1, ui="none").main
    assert saved["devices"] == ["cuda:0"]
    assert saved["scale"] == 256.0 and saved["lr"] == 0.0025  # 4 steps: halved twice
    files = set(os.listdir(folder))
    assert {"model.safetensors", "optimizer.bin", "scheduler.bin", "scaler.pt"} <= files
    assert "dl_state_dict.bin" in files
    assert "random_states_0.pkl" in files

    loaded = notebook_launcher(load_on_the_gpu, args=(folder,), num_processes=1, ui="none").main
    assert loaded["same_weights"] and loaded["same_state"]
    assert loaded["devices"] == loaded["weight_devices"] == ["cuda:0"]
    assert loaded["scale"] == saved["scale"] and loaded["lr"] == saved["lr"]
    x, _ = make_loader().dataset[4 * 32 : 5 * 32]
    assert torch.equal(loaded["x"], x)  # the loader resumed at the fifth batch


LOAD_ON_CPU = textwrap.dedent(
    """
    import json, os, sys
    import torch
    sys.path.insert(0, {tests!r})
    from gpu_support import make_loader, make_model
    from notebook_launcher import Accelerator

    assert not torch.cuda.is_available()
    accelerator = Accelerator()  # no GPU to be seen: a CPU accelerator
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler, loader = accelerator.prepare(
        model, optimizer, scheduler, make_loader()
    )
    accelerator.load_state({folder!r})
    expected = torch.load(os.path.join({folder!r}, "expected.pt"))
    print(json.dumps(dict(
        device=str(accelerator.device),
        weights=all(torch.equal(model.state_dict()[k], v) for k, v in expected["weights"].items()),
        state=all(
            torch.equal(s["exp_avg"], e)
            for s, e in zip(optimizer.state.values(), expected["exp_avg"], strict=True)
        ),
        devices=sorted({{str(v.device) for s in optimizer.state.values() for v in s.values()}}),
        lr=scheduler.get_last_lr()[0],
    )))
    """
)


def test_a_gpu_checkpoint_loads_back_on_a_cpu_only_machine(tmp_path):
    folder = str(tmp_path / "checkpoint")
    notebook_launcher(train_and_save, args=(folder,), num_processes=1, ui="none")
    code = LOAD_ON_CPU.format(tests=os.path.dirname(__file__), folder=folder)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "ACCELERATE_MIXED_PRECISION",
    ):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "device": "cpu",
        "weights": True,
        "state": True,
        "devices": ["cpu"],
        "lr": 0.0025,
    }


def test_save_model_from_the_gpu_reads_on_the_cpu(tmp_path):
    folder = str(tmp_path / "checkpoint")
    notebook_launcher(train_and_save, args=(folder,), num_processes=1, ui="none")
    weights = load_file(os.path.join(folder, "exported", "model.safetensors"))  # CPU tensors
    expected = torch.load(os.path.join(folder, "expected.pt"))["weights"]
    assert sorted(weights) == sorted(expected)
    for name, tensor in expected.items():
        assert weights[name].device.type == "cpu" and torch.equal(weights[name], tensor)
    fresh = make_model()
    fresh.load_state_dict(weights)  # strict: every name is there
