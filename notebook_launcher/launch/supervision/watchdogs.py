"""Small judges of a running attempt: each looks at the worker group and may decide to end it.

A watchdog's ``check(now)`` returns None while all is well, or a :class:`Verdict`: the error to
raise, the reason the stopped ranks are given, the ranks held responsible and whether a restart
may follow. The supervisor asks each one on every turn of its loop; they never stop anything
themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...protocol.events import RankQuiet
from ...protocol.status import RankStatus
from ..errors import DeadlockError, LaunchTimeoutError, WorkerStalledError
from .liveness import stack_signature, waiting_in_collective
from .stacks import holding_up, locate, where_ranks_were

DEADLOCK_AFTER = 3.0  # seconds after a rank returned before the others' stacks are checked
DEADLOCK_RECHECK = 1.5  # seconds between the two stack samples that must agree
STACK_SAMPLES_PER_LIMIT = 5  # stack samples taken within a quiet spell as long as the limit
SHORTEST_SAMPLE_GAP = 0.4  # seconds
LONGEST_SAMPLE_GAP = 30.0


@dataclass(frozen=True)
class Verdict:
    """Why an attempt must end: raise ``error`` once every rank is stopped for ``reason``."""

    error: BaseException
    reason: str
    blamed: tuple[int, ...]
    restartable: bool = True


class Group(Protocol):
    """What the watchdogs read of the worker group (a fake one in unit tests)."""

    handles: list
    sink: object

    def active(self) -> list: ...
    def last_progress(self) -> float: ...
    def collect_stacks(self) -> dict[int, str]: ...
    def publish(self, event: object) -> None: ...


def stopped_phrase(scope: str, named: bool = False) -> str:
    """What was stopped, in a watchdog's message: a launch's ranks, or a session's call (its
    workers live on), named where the sentence has not named it yet."""
    if scope == "launch":
        return "all ranks were stopped"
    return f"{'the call' if named else 'it'} was stopped on every rank"


class TimeoutWatchdog:
    """Ends the attempt at ``deadline`` (monotonic seconds; None: never)."""

    def __init__(self, group: Group, deadline: float | None, scope: str = "launch") -> None:
        self.group = group
        self.deadline = deadline
        self.scope = scope  # what is stopped: "launch", or a session's "call"

    def shift(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later (time a rank spent at a prompt)."""
        if self.deadline is not None:
            self.deadline += seconds

    def check(self, now: float) -> Verdict | None:
        if self.deadline is None or now < self.deadline:
            return None
        stacks = self.group.collect_stacks()
        message = (
            f"the {self.scope} exceeded its timeout; {stopped_phrase(self.scope)}. "
            f"{where_ranks_were(stacks)}"
        )
        return Verdict(
            LaunchTimeoutError(message, stacks), "timeout expired", holding_up(stacks), False
        )


class StallWatchdog:
    """Notices, and then stops, a job in which no rank makes progress.

    A rank's progress is its ``last_alive`` (output, events and work, noted by others) or its
    Python stack moving between two samples, which this watchdog takes while the job is quiet.
    The job is quiet for as long as no rank progressed; a rank waiting for a peer that computes
    is not stalled, since the peer's work is the job's progress.

    Args:
        group: the worker group.
        stall_timeout: quiet seconds after which the job is stopped (:class:`WorkerStalledError`,
            naming the ranks that held the others up); None: never.
        stall_notice: quiet seconds after which the ranks are named in a notice (the sink's and
            a ``RankQuiet`` event per rank), once per quiet spell; None: never.
    """

    def __init__(
        self,
        group: Group,
        stall_timeout: float | None,
        stall_notice: float | None,
        scope: str = "launch",
    ) -> None:
        self.group = group
        self.scope = scope
        self.stall_timeout = stall_timeout
        self.stall_notice = stall_notice
        limits = [limit for limit in (stall_timeout, stall_notice) if limit is not None]
        self.sample_gap = (
            min(max(min(limits) / STACK_SAMPLES_PER_LIMIT, SHORTEST_SAMPLE_GAP), LONGEST_SAMPLE_GAP)
            if limits
            else None
        )
        self._next_sample = 0.0
        self._signatures: dict[int, tuple[tuple | None, float]] = {}  # rank -> (signature, when)
        self._noticed: float | None = None  # the last_progress of the spell noticed

    def shift(self, seconds: float) -> None:
        """Move the times this watchdog keeps ``seconds`` later (the ranks' ``last_alive`` are
        moved by the supervisor)."""
        self._next_sample += seconds
        self._signatures = {r: (sig, when + seconds) for r, (sig, when) in self._signatures.items()}
        if self._noticed is not None:
            self._noticed += seconds

    def check(self, now: float) -> Verdict | None:
        if self.sample_gap is None or not self.group.active():
            return None
        stacks = None
        if now - self.group.last_progress() >= self.sample_gap and now >= self._next_sample:
            stacks = self._sample(now)
        quiet = now - self.group.last_progress()
        limit = self.stall_timeout
        if limit is not None and quiet >= limit:
            if stacks is None:  # the report's stacks are fresh, and may show a move
                stacks = self._sample(now)
                if now - self.group.last_progress() < limit:
                    return None
            return self._stalled(stacks, quiet)
        notice = self.stall_notice
        if notice is not None and quiet >= notice and self._noticed != self.group.last_progress():
            if stacks is None:  # fresh stacks for the notice, which may show a move
                stacks = self._sample(now)
                if now - self.group.last_progress() < notice:
                    return None
            self._notice(stacks, now)
        return None

    def _sample(self, now: float) -> dict[int, str]:
        """Every rank's stack; a rank whose stack moved since the last sample of this quiet
        spell progressed (now)."""
        stacks = self.group.collect_stacks()
        spell = self.group.last_progress()
        for handle in self.group.active():
            signature = stack_signature(stacks.get(handle.rank, ""))
            previous, when = self._signatures.get(handle.rank, (None, float("-inf")))
            if when >= spell and None not in (previous, signature) and signature != previous:
                handle.last_alive = now
            self._signatures[handle.rank] = (signature, now)
        self._next_sample = now + self.sample_gap
        return stacks

    def _stalled(self, stacks: dict[int, str], quiet: float) -> Verdict:
        culprits = self._culprits(stacks)
        limit = self.stall_timeout
        message = (
            f"no rank made progress for {quiet:.0f} s (stall_timeout={limit:g}): no output, no "
            f"events, no computation and no Python stack moving; {_stuck(culprits)}. "
            f"{stopped_phrase(self.scope, named=True).capitalize()}. {where_ranks_were(stacks)} Pass a larger stall_timeout, or None, if "
            "the job legitimately waits that long."
        )
        return Verdict(
            WorkerStalledError(message, stacks, culprits), "stall_timeout expired", culprits
        )

    def _culprits(self, stacks: dict[int, str]) -> tuple[int, ...]:
        """The ranks the others wait for: those not waiting in a collective (when every rank
        waits in one, they wait for each other: all of them)."""
        active = [h.rank for h in self.group.active()]
        held = tuple(r for r in holding_up(stacks) if r in active)
        if held:
            return held
        busy = tuple(r for r in active if not waiting_in_collective(stacks.get(r, "")))
        return busy or tuple(active)

    def _notice(self, stacks: dict[int, str], now: float) -> None:
        self._noticed = self.group.last_progress()
        for handle in self.group.active():
            place = locate(stacks.get(handle.rank, ""))
            where = place.describe() if place else "at an unknown place (no stack)"
            quiet_for = now - handle.last_alive
            self.group.publish(RankQuiet(handle.rank, quiet_for, where, handle.last_alive))
        until = (
            f"stall_timeout={self.stall_timeout:g} s stops the run"
            if self.stall_timeout is not None
            else "stall_timeout=None: nothing will stop it"
        )
        self.group.sink.notice(
            f"notebook_launcher: no rank has made progress for {self.stall_notice:g} s (no "
            f"output, no events, no computation, no Python stack moving); "
            f"{_stuck(self._culprits(stacks))}. Nothing was stopped ({until}). "
            f"{where_ranks_were(stacks)}"
        )


def _stuck(ranks: tuple[int, ...]) -> str:
    names = ", ".join(map(str, ranks))
    return f"rank {names} {'is' if len(ranks) == 1 else 'are'} where the job is stuck"


class DeadlockWatchdog:
    """Ends the attempt once a rank returned while every other waits in a collective.

    ``after`` seconds after the first rank returned, the others' stacks are sampled; if every
    one of them waits in a collective at the same place in two samples ``DEADLOCK_RECHECK``
    apart, the wait can never end (a rank that returned never joins another collective).
    """

    def __init__(self, group: Group, after: float = DEADLOCK_AFTER, scope: str = "launch") -> None:
        self.group = group
        self.after = after
        self.scope = scope
        self._next_check = float("-inf")
        self._places: dict | None = None  # the last sample of the waiting ranks

    def shift(self, seconds: float) -> None:
        """Move the next check ``seconds`` later (the ranks' ``finished_at`` are moved by the
        supervisor)."""
        self._next_check += seconds

    def check(self, now: float) -> Verdict | None:
        if now < self._next_check:
            return None
        returned = [h for h in self.group.handles if h.status == RankStatus.FINISHED]
        waiting = self.group.active()
        if not returned or not waiting:
            return None
        since = min(h.finished_at if h.finished_at is not None else now for h in returned)
        if now - since < self.after:
            self._next_check = since + self.after
            return None
        self._next_check = now + DEADLOCK_RECHECK
        stacks = self.group.collect_stacks()
        if any(not h.status.active for h in waiting):
            return None  # one finished or failed meanwhile: the loop handles it
        places = {h.rank: locate(stacks.get(h.rank, "")) for h in waiting}
        if not all(
            p is not None and p.in_collective and not p.in_rendezvous for p in places.values()
        ):
            self._places = None
            return None
        if places != self._places:
            self._places = places  # the first sample: the second must agree
            return None
        gone = tuple(h.rank for h in returned)
        held = tuple(h.rank for h in waiting)
        message = (
            f"rank {', '.join(map(str, gone))} returned while rank {', '.join(map(str, held))} "
            f"waited for it in a collective (at the same place in two samples "
            f"{DEADLOCK_RECHECK:g} s apart): a certain deadlock, so {stopped_phrase(self.scope, named=True)}. "
            f"{where_ranks_were(stacks)} Every rank must take part in each collective the "
            "others call: a rank that returns early (or skips a collective under an if) leaves "
            "the others waiting forever."
        )
        return Verdict(DeadlockError(message, stacks, held, gone), "certain deadlock", gone)
