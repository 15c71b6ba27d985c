"""CUDA and the launcher in a real ipykernel: a cell that initialises CUDA is named when a fork
launch follows, ``start_method="auto"`` switches to spawn and trains on the GPU, and a fork
launch from a clean kernel trains on the GPU and leaves the kernel clean."""

from __future__ import annotations

import json
import os

import pytest
from gpu_support import NEEDS_GPU

pytestmark = [*NEEDS_GPU, pytest.mark.kernel, pytest.mark.timeout(300)]

SETUP = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import torch
from notebook_launcher import notebook_launcher

def train(steps):
    import torch
    from notebook_launcher import Accelerator
    accelerator = Accelerator(mixed_precision="bf16")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    x, y = x.to(accelerator.device), x.sum(1, keepdim=True).to(accelerator.device)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return dict(device=str(accelerator.device), first=losses[0], last=losses[-1],
                bad_fork=torch.cuda._is_in_bad_fork())
"""

CUDA_IN_A_CELL = """
def load_model():
    return torch.nn.Linear(4, 4).to("cuda")

model = load_model()
"""

FORK = "result = notebook_launcher(train, args=(50,), num_processes=1)"
AUTO = """
result = notebook_launcher(train, args=(50,), num_processes=1, start_method="auto")
print("RESULT", json.dumps(result.main))
"""


def _trained(cell) -> dict:
    line = next(x for x in cell.stream("stdout").splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_cuda_in_a_cell_then_a_fork_launch_names_the_cell_and_auto_trains_by_spawn(kernel):
    assert kernel.execute(SETUP, timeout=120).error() is None
    cell = kernel.execute(CUDA_IN_A_CELL, timeout=120)
    assert cell.error() is None, cell.output()

    refused = kernel.execute(FORK, timeout=120)
    error = refused.error()
    assert error is not None and error["ename"] == "PreflightError", refused.output()
    text = refused.traceback()
    assert "CUDA has already been initialised in this kernel (by torch)" in text
    assert "Cell In[" in text and ", line 3, in load_model" in text  # the cell and its line
    assert 'return torch.nn.Linear(4, 4).to("cuda")' in text
    assert "start_method='auto'" in text
    assert not kernel.workers()  # nothing was started

    switched = kernel.execute(AUTO, timeout=240)
    assert switched.error() is None, switched.output()
    assert "Starting the workers by spawn instead of fork." in switched.stream("stderr")
    out = _trained(switched)
    assert out["device"] == "cuda:0" and not out["bad_fork"]
    assert out["last"] < 0.1 * out["first"]


def test_a_fork_launch_from_a_clean_kernel_trains_on_the_gpu_and_keeps_the_kernel_clean(kernel):
    assert kernel.execute(SETUP, timeout=120).error() is None
    cell = kernel.execute(AUTO.replace('start_method="auto"', 'start_method="fork"'), timeout=240)
    assert cell.error() is None, cell.output()
    assert "spawn instead of fork" not in cell.stream("stderr")
    out = _trained(cell)
    assert out["device"] == "cuda:0" and out["bad_fork"] is False
    assert out["last"] < 0.1 * out["first"]
    after = kernel.execute("print('CUDA in the kernel:', torch.cuda.is_initialized())", timeout=30)
    assert "CUDA in the kernel: False" in after.stream("stdout")
    again = kernel.execute(AUTO, timeout=240)  # the kernel can launch again, still by fork
    assert again.error() is None and "spawn instead of fork" not in again.stream("stderr")
