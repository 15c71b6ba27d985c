"""Mixed precision for the Accelerator: autocast regions, the fp16 gradient scaler, fp32 outputs."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..ops.structures import convert_to_fp32
from ..utils.kwargs import AutocastKwargs, GradScalerKwargs
from ..utils.validation import invalid

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def autocast_dtype(mixed_precision: str) -> torch.dtype | None:
    """The autocast dtype of a precision mode ("no" and "fp8": None)."""
    return DTYPES.get(mixed_precision)


def check_autocast(device: torch.device, mixed_precision: str) -> None:
    """Raise a ValueError if ``device`` cannot autocast to the dtype of ``mixed_precision``.

    torch only warns (and silently disables autocast) for an unsupported dtype; this turns that
    into an error at construction instead of a run in full precision.
    """
    dtype = autocast_dtype(mixed_precision)
    if dtype is None:
        return
    reason = None
    if not torch.amp.is_autocast_available(device.type):
        reason = f"torch has no autocast for {device.type!r} devices"
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            context = torch.autocast(device_type=device.type, dtype=dtype)
        if not context._enabled:
            reason = "; ".join(str(w.message) for w in caught) or "torch disabled it"
    if reason is not None:
        raise ValueError(
            f"mixed_precision={mixed_precision!r} is not supported on this {device.type} device "
            f"({reason}); use " + ("'bf16' or 'no'" if mixed_precision == "fp16" else "'no'")
        )


def autocast_context(
    device: torch.device, mixed_precision: str, handler: AutocastKwargs | None
) -> contextlib.AbstractContextManager:
    """The autocast region for ``mixed_precision`` ("no": an empty context)."""
    dtype = autocast_dtype(mixed_precision)
    handler = handler or AutocastKwargs()
    if dtype is None:
        return contextlib.nullcontext()
    kwargs: dict[str, Any] = {"device_type": device.type, "dtype": dtype}
    kwargs["enabled"] = handler.enabled
    if handler.cache_enabled is not None:
        kwargs["cache_enabled"] = handler.cache_enabled
    return torch.autocast(**kwargs)


def make_scaler(
    device: torch.device, mixed_precision: str, handler: GradScalerKwargs | None
) -> torch.amp.GradScaler | None:
    """The fp16 gradient scaler (None for other precisions)."""
    if mixed_precision != "fp16":
        return None
    kwargs = (handler or GradScalerKwargs()).to_kwargs()
    try:
        return torch.amp.GradScaler(device.type, **kwargs)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(
            f"mixed_precision='fp16' needs a gradient scaler on {device.type} devices, which "
            f"this torch cannot make ({exc}); use 'bf16' or 'no'"
        ) from None


class Fp32Forward:
    """A model's forward run under autocast, with floating-point outputs returned as float32.

    A class rather than a closure so that prepared models stay picklable.
    """

    def __init__(
        self, forward: Callable[..., Any], device: torch.device, precision: str, handler: Any
    ) -> None:
        self.forward = forward
        self.device = device
        self.precision = precision
        self.handler = handler
        functools.update_wrapper(self, forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with autocast_context(self.device, self.precision, self.handler):
            outputs = self.forward(*args, **kwargs)
        return convert_to_fp32(outputs)


def wrap_forward(
    model: torch.nn.Module, device: torch.device, precision: str, handler: Any
) -> None:
    """Run ``model``'s forward under autocast with float32 outputs (undone by ``unwrap_model``)."""
    if not isinstance(model, torch.nn.Module):
        raise invalid("model", model, "expected a torch.nn.Module", TypeError)
    if "_original_forward" in model.__dict__:
        return
    original = model.forward
    model._original_forward = original
    model.forward = Fp32Forward(original, device, precision, handler)
