"""What the GPU tests share: the marks, and a small regression model trained in the workers."""

from __future__ import annotations

import pytest
import torch

from notebook_launcher.utils.environment import cuda_device_count

GPUS = cuda_device_count()  # asked through NVML: the test process never initialises CUDA
NEEDS_GPU = [pytest.mark.gpu, pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU")]
needs_two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")

SAMPLES = 256
FEATURES = 16
BATCH = 32
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def regression_data(samples: int = SAMPLES) -> tuple[torch.Tensor, torch.Tensor]:
    """The same inputs and targets wherever it is called (CPU tensors)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator)
    y = x @ w + 0.1 * torch.randn(samples, 1, generator=generator)
    return x, y


def make_model() -> torch.nn.Module:
    """The same initial weights wherever it is called (on the CPU)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    )


def make_loader(samples: int = SAMPLES) -> torch.utils.data.DataLoader:
    dataset = torch.utils.data.TensorDataset(*regression_data(samples))
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=False)


def plain_losses(precision: str, epochs: int = 2, device: str = "cuda:0") -> dict:
    """A plain single-GPU loop on ``device``: autocast to ``precision``'s dtype ("no": none), a
    ``torch.amp.GradScaler`` for fp16; the loss is taken in float32 outside autocast."""
    device = torch.device(device)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    dtype = DTYPES.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    losses, scales = [], []
    for _ in range(epochs):
        for x, y in make_loader():
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            if dtype is None:
                out = model(x)
            else:
                with torch.autocast(device.type, dtype=dtype):
                    out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                scales.append(float(scaler.get_scale()))
            losses.append(loss.item())
    return {"losses": losses, "scales": scales}


def accelerator_losses(precision: str, epochs: int = 2) -> dict:
    """The same training with notebook_launcher's ``Accelerator(mixed_precision=precision)``."""
    from notebook_launcher import Accelerator

    accelerator = Accelerator(mixed_precision=precision)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
    inner_dtypes = set()
    hook = model[0].register_forward_hook(lambda _m, _i, out: inner_dtypes.add(str(out.dtype)))
    losses, scales, out_dtypes, batch_devices = [], [], set(), set()
    for _ in range(epochs):
        for x, y in loader:
            batch_devices.add(str(x.device))
            optimizer.zero_grad()
            out = model(x)
            out_dtypes.add(str(out.dtype))
            loss = torch.nn.functional.mse_loss(out, y)
            accelerator.backward(loss)
            optimizer.step()
            if accelerator.scaler is not None:
                scales.append(float(accelerator.scaler.get_scale()))
            losses.append(loss.item())
    hook.remove()
    return {
        "losses": losses,
        "scales": scales,
        "scaler": type(accelerator.scaler).__module__ + "." + type(accelerator.scaler).__name__,
        "precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
        "inner_dtypes": sorted(inner_dtypes),
        "out_dtypes": sorted(out_dtypes),
        "batch_devices": sorted(batch_devices),
    }


def train_both(precision: str) -> dict:
    """In one worker: the plain loop, then the Accelerator (same model, data and order)."""
    return {"plain": plain_losses(precision), "ours": accelerator_losses(precision)}
