"""The one channel between worker processes and the kernel.

Workers send the ``Worker*`` events over a pipe; the kernel-side supervisor turns raw output bytes
into :class:`OutputLine` events and process exits into :class:`WorkerExited`. Every consumer (the
supervisor itself, console output, notebook panels) sees only these small frozen records.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerStarted:
    """A worker finished its bootstrap and is about to call the user's function."""

    rank: int
    pid: int
    time: float


@dataclass(frozen=True)
class WorkerFinished:
    """The user's function returned; ``payload`` is its cloudpickled return value."""

    rank: int
    payload: bytes
    time: float


@dataclass(frozen=True)
class WorkerFailed:
    """The user's function (or the bootstrap) raised.

    ``payload`` is the cloudpickled exception when it survives a pickling round trip, else None.
    """

    rank: int
    exc_type: str
    message: str
    traceback: str
    payload: bytes | None
    time: float


@dataclass(frozen=True)
class OutputLine:
    """One complete line a worker wrote to its stdout or stderr (file-descriptor level)."""

    rank: int
    stream: str  # "stdout" or "stderr"
    text: str


@dataclass(frozen=True)
class WorkerExited:
    """The kernel saw a worker process end; ``exitcode`` is negative for a signal."""

    rank: int
    exitcode: int | None


WorkerEvent = WorkerStarted | WorkerFinished | WorkerFailed
