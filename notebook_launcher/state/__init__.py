"""Shared per-process state of a job."""

from __future__ import annotations

from .enums import DistributedType
from .partial import PartialState


def reset_state() -> None:
    """Forget every shared state singleton of this process (a fresh worker starts this way)."""
    PartialState._reset_state()


__all__ = ["DistributedType", "PartialState", "reset_state"]
