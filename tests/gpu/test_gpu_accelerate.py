"""Accelerate's own ``Accelerator()`` under the launcher on the GPU: it finds the GPU, trains,
and matches a plain single-GPU loop."""

from __future__ import annotations

import pytest
import torch
from gpu_support import NEEDS_GPU, make_loader, make_model, needs_two_gpus, plain_losses

from notebook_launcher import notebook_launcher

pytestmark = NEEDS_GPU


def with_accelerate(precision):
    import accelerate

    accelerator = accelerate.Accelerator(mixed_precision=precision)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
    losses, devices = [], set()
    for x, y in loader:
        devices.add(str(x.device))
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    accelerator.end_training()
    world = accelerator.num_processes
    return {
        "device": str(accelerator.device),
        "world": world,
        "rank": accelerator.process_index,
        "precision": str(accelerator.mixed_precision),
        "batch_devices": sorted(devices),
        "losses": losses,
        "plain": plain_losses(precision, epochs=1)["losses"] if world == 1 else None,
    }


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_accelerates_accelerator_trains_on_the_gpu_like_a_plain_loop(precision):
    out = notebook_launcher(with_accelerate, args=(precision,), num_processes=1, ui="none").main
    assert out["device"] == "cuda:0" and out["world"] == 1
    assert out["precision"] == precision
    assert out["batch_devices"] == ["cuda:0"]
    assert out["losses"] == pytest.approx(out["plain"], rel=2e-3, abs=2e-3)
    assert out["losses"][-1] < out["losses"][0]


@needs_two_gpus
def test_accelerates_accelerator_forms_one_job_on_two_gpus():
    result = notebook_launcher(with_accelerate, args=("no",), num_processes=2, ui="none")
    assert [(out["rank"], out["world"], out["device"]) for out in result.values] == [
        (0, 2, "cuda:0"),
        (1, 2, "cuda:1"),
    ]
