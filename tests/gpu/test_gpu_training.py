"""One process on the GPU training with notebook_launcher's Accelerator in fp32, fp16 and bf16,
against a plain single-GPU loop; what ``prepare`` puts on ``cuda:0``; fp16's skipped steps."""

from __future__ import annotations

import math

import pytest
import torch
from gpu_support import NEEDS_GPU, make_model, regression_data, train_both

from notebook_launcher import Accelerator, GradScalerKwargs, notebook_launcher

pytestmark = NEEDS_GPU


def launch_one(function, *args):
    return notebook_launcher(function, args=args, num_processes=1, ui="none").main


def _close(ours, plain, rel):
    assert len(ours) == len(plain) > 0
    for step, (a, b) in enumerate(zip(ours, plain, strict=True)):
        assert math.isfinite(a), (step, ours)
        assert a == pytest.approx(b, rel=rel, abs=rel), (step, ours, plain)


def test_fp32_training_matches_a_plain_gpu_loop():
    out = launch_one(train_both, "no")
    ours, plain = out["ours"], out["plain"]
    assert ours["device"] == "cuda:0" and ours["precision"] == "no"
    assert ours["batch_devices"] == ["cuda:0"]
    assert ours["inner_dtypes"] == ["torch.float32"] and ours["scaler"] == "builtins.NoneType"
    _close(ours["losses"], plain["losses"], 1e-4)
    assert ours["losses"][-1] < 0.5 * ours["losses"][0]  # it learns


def test_bf16_training_runs_under_autocast_and_matches_a_plain_autocast_loop():
    out = launch_one(train_both, "bf16")
    ours, plain = out["ours"], out["plain"]
    assert ours["precision"] == "bf16"
    assert ours["inner_dtypes"] == ["torch.bfloat16"]  # the layers compute in bf16
    assert ours["out_dtypes"] == ["torch.float32"]  # the model's outputs come back as float32
    assert ours["scaler"] == "builtins.NoneType"  # bf16 needs no gradient scaler
    _close(ours["losses"], plain["losses"], 2e-3)
    assert ours["losses"][-1] < 0.5 * ours["losses"][0]


def test_fp16_training_uses_a_real_grad_scaler_and_matches_a_plain_scaler_loop():
    out = launch_one(train_both, "fp16")
    ours, plain = out["ours"], out["plain"]
    assert ours["precision"] == "fp16"
    assert ours["scaler"].startswith("torch.amp") and ours["scaler"].endswith(".GradScaler")
    assert ours["inner_dtypes"] == ["torch.float16"]
    assert ours["out_dtypes"] == ["torch.float32"]
    assert ours["scales"] == plain["scales"]  # the same scale, step by step
    _close(ours["losses"], plain["losses"], 2e-3)
    assert ours["losses"][-1] < 0.5 * ours["losses"][0]


def overflow_then_recover():
    accelerator = Accelerator(
        mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)]
    )
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    x, y = (t[:32].to(accelerator.device) for t in regression_data())
    first_scale = accelerator.scaler.get_scale()
    before = [p.detach().clone() for p in model.parameters()]

    loss = torch.nn.functional.mse_loss(model(x), y) * float("inf")  # gradients overflow
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    skipped = (optimizer.step_was_skipped, accelerator.optimizer_step_was_skipped)
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    after_skip = (accelerator.scaler.get_scale(), optimizer.param_groups[0]["lr"])

    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    moved = not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return {
        "first_scale": first_scale,
        "skipped": skipped,
        "unchanged": unchanged,
        "after_skip": after_skip,
        "then_skipped": (optimizer.step_was_skipped, accelerator.optimizer_step_was_skipped),
        "moved": moved,
        "lr": optimizer.param_groups[0]["lr"],
        "finite": all(torch.isfinite(p).all().item() for p in model.parameters()),
    }


def test_fp16_overflow_skips_the_step_halves_the_scale_and_holds_the_scheduler():
    out = launch_one(overflow_then_recover)
    assert out["first_scale"] == 1024.0  # GradScalerKwargs reached torch's GradScaler
    assert out["skipped"] == (True, True)
    assert out["unchanged"]  # the skipped step left every parameter as it was
    assert out["after_skip"] == (512.0, 0.1)  # scale backed off; the scheduler did not step
    assert out["then_skipped"] == (False, False)
    assert out["moved"] and out["finite"]
    assert out["lr"] == pytest.approx(0.05)  # the real step moved the scheduler on


def placement():
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    # Optimizer state made on the CPU before prepare, as after loading a CPU checkpoint.
    model(regression_data()[0][:4]).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(*regression_data()), batch_size=8
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    state_before = sorted(
        {str(v.device) for s in optimizer.state.values() for v in s.values() if v.dim() > 0}
    )
    x, y = next(iter(loader))
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    return {
        "accelerator": str(accelerator.device),
        "current": torch.cuda.current_device(),
        "parameters": sorted({str(p.device) for p in model.parameters()}),
        "grads": sorted({str(p.grad.device) for p in model.parameters()}),
        "state_before": state_before,
        "state_after": sorted(
            {str(v.device) for s in optimizer.state.values() for v in s.values() if v.dim() > 0}
        ),
        "batch": (str(x.device), str(y.device)),
        "wrapped": type(model).__name__,
    }


def test_prepare_puts_model_optimizer_state_and_batches_on_cuda_0():
    out = launch_one(placement)
    assert out["accelerator"] == "cuda:0" and out["current"] == 0
    assert out["parameters"] == out["grads"] == ["cuda:0"]
    assert out["state_before"] == out["state_after"] == ["cuda:0"]  # moved by prepare
    assert out["batch"] == ("cuda:0", "cuda:0")
    assert out["wrapped"] == "Sequential"  # one process: no DistributedDataParallel


def launched_precision():
    accelerator = Accelerator()
    return accelerator.mixed_precision, accelerator.scaler is not None


@pytest.mark.parametrize(("precision", "scaler"), [("bf16", False), ("fp16", True)])
def test_the_launchs_mixed_precision_reaches_the_accelerator(precision, scaler):
    result = notebook_launcher(
        launched_precision, num_processes=1, mixed_precision=precision, ui="none"
    )
    assert result.main == (precision, scaler)


def clipped_norms():
    from gpu_support import make_loader

    # A scale low enough that the first backward does not overflow in float16.
    accelerator = Accelerator(
        mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=256.0)]
    )
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
    x, y = next(iter(loader))
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9)
    unscaled = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in model.parameters()])
    )
    return float(norm), float(unscaled), float(accelerator.scaler.get_scale())


def test_fp16_gradients_are_unscaled_before_clipping():
    norm, unscaled, scale = launch_one(clipped_norms)
    assert scale == 256.0
    assert norm == pytest.approx(unscaled, rel=1e-4)  # the norm of the real gradients
    assert norm < 1e3  # not the scaled ones (about scale × larger)
