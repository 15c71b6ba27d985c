"""How a worker reports the outcome of the user's code to the kernel: the value or the failure,
after whatever it logged and printed."""

from __future__ import annotations

import sys
import time
from typing import Any

from .. import live
from ..protocol import results
from ..protocol.events import WorkerFailed, WorkerFinished
from ..utils.tree import to_cpu
from .prompts import quit_error


def failure_event(rank: int, exc: BaseException) -> WorkerFailed:
    exc = quit_error(exc, rank)
    try:
        payload = results.dumps(exc)
        results.receive(payload).load()
    except Exception:
        payload = None
    return WorkerFailed.from_exception(rank, exc, payload)


def result_event(rank: int, value: Any, owner_pid: int) -> WorkerFinished:
    try:
        payload = results.dumps(to_cpu(value), owner_pid)
    except Exception as exc:
        raise TypeError(
            f"rank {rank} returned a value that cannot be pickled and sent back to the kernel: "
            f"{type(value).__name__} ({exc}). Return plain Python objects or tensors."
        ) from exc
    return WorkerFinished(rank=rank, payload=payload, time=time.time())


def send_live(stop: bool = True) -> None:
    """Send what the function logged (metrics, progress, status) ahead of its last event, so the
    kernel holds every value a rank logged before it returned (``stop``: and stop tracking)."""
    try:
        live.flush(stop)
    except Exception:  # a broken pipe: the last event will fail to send as well
        pass


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
