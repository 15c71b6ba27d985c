"""A rank's status, and the one rule that moves it on an event.

The kernel's worker group and the panels' model both fold the same events into a status with
:func:`next_status`, so they can never disagree about what a rank is doing.
"""

from __future__ import annotations

from enum import Enum

from .events import WorkerExited, WorkerFailed, WorkerFinished, WorkerStarted, WorkerStopped


class RankStatus(str, Enum):
    """Where a rank is in its life. Compares equal to its value (``"running"`` ...)."""

    STARTING = "starting"  # its process started; the user's function has not been called yet
    RUNNING = "running"  # the user's function runs
    FINISHED = "finished"  # the function returned (the process may still be exiting)
    FAILED = "failed"  # the function raised, or the process died without a word
    STOPPED = "stopped"  # the kernel stopped it: another rank failed, a timeout, a stop request

    @property
    def active(self) -> bool:
        """Whether the rank may still make progress (starting or running)."""
        return self in (RankStatus.STARTING, RankStatus.RUNNING)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:  # shown in notebooks as the plain name it compares equal to
        return repr(self.value)


def next_status(status: RankStatus, event: object) -> RankStatus:
    """The status of a rank in ``status`` once ``event`` (about that rank) arrived.

    A started worker runs (a restart starts its ranks afresh); only an active rank can finish,
    fail or be stopped, so a rank stopped by the kernel stays stopped whatever it reports on
    its way out, and a process that exits after its rank returned is still finished.
    """
    if isinstance(event, WorkerStarted):
        return RankStatus.RUNNING
    if not status.active:
        return status
    if isinstance(event, WorkerFinished):
        return RankStatus.FINISHED
    if isinstance(event, (WorkerFailed, WorkerExited)):
        return RankStatus.FAILED  # an exit while active: a crash, a signal or os._exit
    if isinstance(event, WorkerStopped):
        return RankStatus.STOPPED
    return status
