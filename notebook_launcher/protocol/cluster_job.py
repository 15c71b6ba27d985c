"""Where a launch's cluster job stands (a Slurm job: queued, running, its time limit), as the
panels and the cell say it."""

from __future__ import annotations

import time
from dataclasses import dataclass

WARN_FRACTION = 0.1  # a job warns once less than this part of its time limit is left ...
WARN_AT_LEAST = 300.0  # ... or less than this many seconds, whichever comes first


@dataclass(frozen=True)
class ClusterJob:
    """The state of the job a launch's ranks run in, each time it changes (and while it runs).

    Attributes:
        job: the scheduler's job id.
        state: its state ("PENDING", "RUNNING", ...).
        reason: why it waits ("Resources", "Priority", "JobHeldUser"; "" when none).
        expected_start: when the scheduler expects it to start ("" when it does not know).
        started_at: when it started (seconds since the epoch), once it runs.
        ends_at: when its time limit ends it (seconds since the epoch); None without a limit.
        scheduler: the scheduler's name, as the text says it.
    """

    job: str
    state: str
    reason: str = ""
    expected_start: str = ""
    started_at: float | None = None
    ends_at: float | None = None
    scheduler: str = "Slurm"

    @property
    def pending(self) -> bool:
        return self.state not in ("RUNNING", "COMPLETING")

    def left(self, now: float | None = None) -> float | None:
        """Seconds until its time limit (never below 0); None without a limit or before it runs."""
        if self.ends_at is None or self.pending:
            return None
        return max(0.0, self.ends_at - (time.time() if now is None else now))

    def near_limit(self, now: float | None = None) -> bool:
        """Whether less than :data:`WARN_FRACTION` of its time limit, or less than
        :data:`WARN_AT_LEAST` seconds, is left."""
        left = self.left(now)
        if left is None:
            return False
        limit = self.ends_at - self.started_at if self.started_at is not None else None
        return left < WARN_AT_LEAST or (limit is not None and left < WARN_FRACTION * limit)

    def text(self, now: float | None = None) -> str:
        """One line: 'Slurm job 12 pending (Resources), expected start 2026-12-02T05:10:00' or
        'Slurm job 12 running, 4 min 10 s left'."""
        line = f"{self.scheduler} job {self.job} {self.state.lower()}"
        if self.pending:
            if self.reason and self.reason != "None":
                line += f" ({self.reason})"
            return line + f", expected start {self.expected_start or 'not known yet'}"
        left = self.left(now)
        if left is None:
            return line + ", no time limit"
        return line + f", {duration(left)} left"

    def warning(self, now: float | None = None) -> str | None:
        """What the cell says when the job is near its time limit; None otherwise."""
        if not self.near_limit(now):
            return None
        return (
            f"notebook_launcher: {self.scheduler} job {self.job} reaches its time limit in "
            f"{duration(self.left(now))}: the ranks are ended then; save what you need"
        )


def duration(seconds: float) -> str:
    """'2 h 5 min', '4 min 10 s', '40 s'."""
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
