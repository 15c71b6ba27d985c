"""The one channel between worker processes and the kernel.

Workers send the ``Worker*`` events over a pipe; the kernel-side supervisor turns raw output bytes
into :class:`OutputLine` events and process exits into :class:`WorkerExited`. Every consumer (the
supervisor itself, console output, notebook panels) sees only these small frozen records.
"""

from __future__ import annotations

import time as _time
import traceback as _traceback
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerStarted:
    """A worker finished its bootstrap and is about to call the user's function; ``node`` names
    the machine of a rank on a cluster ("" on this one)."""

    rank: int
    pid: int
    time: float
    node: str = ""


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

    @classmethod
    def from_exception(
        cls, rank: int, exc: BaseException, payload: bytes | None = None
    ) -> WorkerFailed:
        """The event for ``exc`` raised on ``rank``: its qualified type, message and traceback."""
        kind = type(exc)
        return cls(
            rank=rank,
            exc_type=f"{kind.__module__}.{kind.__qualname__}",
            message=str(exc),
            traceback="".join(_traceback.format_exception(kind, exc, exc.__traceback__)),
            payload=payload,
            time=_time.time(),
        )


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


@dataclass(frozen=True)
class WorkerStopped:
    """The kernel stopped a rank that was still running (another rank failed, a timeout, a stall,
    an interrupt or a stop request); ``reason`` says which.

    ``requested`` is True when the user asked for it (a stop request or an interrupt): not an
    error. ``blamed`` names the ranks the kernel holds responsible (the rank whose failure stopped
    the others, the rank a stall or timeout report says held the others up), if any.
    """

    rank: int
    reason: str
    requested: bool = False
    blamed: tuple[int, ...] = ()


@dataclass(frozen=True)
class TrackingBatch:
    """What a rank reported through :mod:`notebook_launcher.live` since its last batch.

    Sent by a background thread of the worker about ten times a second, and once more before the
    worker reports its result or failure, so nothing logged before a normal exit is lost.

    ``metrics`` holds ``(step, {name: value})`` records in the order they were logged (``step``
    None: the rank did not give one). ``progress`` is the latest ``(description, done, total,
    elapsed seconds)`` of the rank's active progress bar, ``status`` its latest status text and
    ``memory`` the bytes of device memory it holds, each None when unchanged or unknown.
    """

    rank: int
    metrics: tuple[tuple[int | float | None, dict[str, float]], ...] = ()
    progress: tuple[str | None, int, int | None, float] | None = None
    status: str | None = None
    memory: int | None = None


@dataclass(frozen=True)
class SupervisorTick:
    """The supervisor is still watching (sent a few times a second, made in the kernel).

    ``last_alive`` pairs each rank with the kernel's monotonic time of its last progress
    (output, events, computation, a moved stack), so views can say how long each rank has been
    quiet.
    """

    time: float
    last_alive: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RankQuiet:
    """No rank of the job has made progress for ``stall_notice`` seconds; this one has made none
    for ``quiet_for`` seconds, since the kernel's monotonic time ``since``; ``where`` says where
    its stack was ("in train (Cell In[3]:5)"). A notice, made in the kernel once per quiet spell
    for each rank at work: nothing was stopped (``stall_timeout`` decides that)."""

    rank: int
    quiet_for: float
    where: str
    since: float


@dataclass(frozen=True)
class EventBatch:
    """Several events a worker sends at once, in order: one message, so the kernel wakes once
    for them (a session's rank ending a call: its result, then that it is idle)."""

    events: tuple[object, ...]


WorkerEvent = WorkerStarted | WorkerFinished | WorkerFailed | TrackingBatch | EventBatch
