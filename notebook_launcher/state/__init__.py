"""Shared per-process state of a job."""

from __future__ import annotations

from ..backends import reset_backend_choice
from ..utils.enums import (
    DDPCommunicationHookType,
    DistributedType,
    LoggerType,
    PrecisionType,
    RNGType,
)
from .accelerator_state import AcceleratorState
from .gradient import GradientState
from .partial import PartialState


def is_initialized() -> bool:
    """Whether an Accelerator created the :class:`AcceleratorState` in this process."""
    return bool(AcceleratorState._shared_state)


def reset_state() -> None:
    """Forget every shared state singleton of this process (a fresh worker starts this way)."""
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    reset_backend_choice()


__all__ = [
    "AcceleratorState",
    "DDPCommunicationHookType",
    "DistributedType",
    "GradientState",
    "LoggerType",
    "PartialState",
    "PrecisionType",
    "RNGType",
    "is_initialized",
    "reset_state",
]
