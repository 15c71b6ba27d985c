"""Launch decisions on a GPU machine: how many processes, which GPU each rank gets, spawn, and
CUDA initialised in the launching process before a fork launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from gpu_support import GPUS, NEEDS_GPU, accelerator_losses

from notebook_launcher import PartialState, notebook_launcher, plan_launch

pytestmark = NEEDS_GPU


def where_am_i():
    state = PartialState()
    return {
        "rank": state.process_index,
        "world": state.num_processes,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "device": str(state.device),
        "current": torch.cuda.current_device(),
        "distributed_type": str(state.distributed_type),
        "group": state.backend,
        "visible": torch.cuda.device_count(),
    }


def test_num_processes_none_starts_one_process_per_gpu():
    plan = plan_launch(ui="none")
    assert (plan.num_processes, plan.device, plan.start_method) == (GPUS, "cuda", "fork")
    result = notebook_launcher(where_am_i, ui="none")  # num_processes=None
    assert len(result) == GPUS
    for rank, out in enumerate(result.values):
        assert out["world"] == GPUS and out["rank"] == out["local_rank"] == rank
        assert out["device"] == f"cuda:{rank}" and out["current"] == rank  # one GPU per rank
        assert out["group"] == "nccl" and out["distributed_type"] == "DistributedType.MULTI_GPU"
        assert out["visible"] == GPUS


def test_more_processes_than_gpus_is_refused_before_anything_starts():
    asked = GPUS + 1
    with pytest.raises(ValueError) as info:
        notebook_launcher(where_am_i, num_processes=asked, ui="none")
    message = str(info.value)
    assert f"num_processes={asked}" in message
    assert str(GPUS) in message  # says how many GPUs there are
    with pytest.raises(ValueError):
        plan_launch(num_processes=asked)


def test_a_spawn_launch_trains_on_the_gpu():
    result = notebook_launcher(
        accelerator_losses, args=("bf16",), num_processes=1, start_method="spawn", ui="none"
    )
    out = result.main
    assert out["device"] == "cuda:0" and out["precision"] == "bf16"
    assert out["losses"][-1] < 0.5 * out["losses"][0]


# The launching script; its body is guarded because spawn's children import the main module.
CUDA_THEN_FORK = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    from gpu_support import accelerator_losses
    from notebook_launcher import PreflightError, notebook_launcher

    def load_model():
        return torch.nn.Linear(4, 4).to("cuda")

    if __name__ == "__main__":
        model = load_model()
        found = dict(initialised=torch.cuda.is_initialized())
        try:
            notebook_launcher(accelerator_losses, args=("no",), num_processes=1, ui="none")
        except PreflightError as error:
            found["error"] = str(error)
        result = notebook_launcher(
            accelerator_losses, args=("no",), num_processes=1, ui="none", start_method="auto"
        )
        found["auto"] = dict(device=result.main["device"], losses=result.main["losses"])
        print(json.dumps(found))
    """
)


def test_cuda_initialised_before_a_fork_is_named_and_auto_switches_to_spawn(tmp_path):
    script = tmp_path / "notebook.py"
    script.write_text(CUDA_THEN_FORK.format(tests=os.path.dirname(__file__)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["initialised"]
    error = found["error"]
    assert "CUDA has already been initialised in this kernel (by torch)" in error
    assert f"{script}, line 9, in load_model" in error  # the first call that initialised CUDA
    assert 'return torch.nn.Linear(4, 4).to("cuda")' in error
    assert "start_method='spawn'" in error and "start_method='auto'" in error
    assert "Starting the workers by spawn instead of fork." in done.stderr
    assert found["auto"]["device"] == "cuda:0"
    losses = found["auto"]["losses"]
    assert losses[-1] < 0.5 * losses[0]


def several_launches(count):
    return [notebook_launcher(where_am_i, num_processes=1, ui="none").main for _ in range(count)]


def test_launch_after_launch_from_the_same_process_keeps_working():
    # The launching process never initialises CUDA, so every launch can fork.
    outs = several_launches(3)
    assert [out["device"] for out in outs] == ["cuda:0"] * 3
    assert not torch.cuda.is_initialized()
