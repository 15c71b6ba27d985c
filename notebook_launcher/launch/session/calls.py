"""One call of a session, supervised as a launch's attempt is: every rank runs it, the watchdogs
judge it, and a failure, a timeout, a stall or an interrupt stops it on every rank while the
workers, their namespaces and (where no collective was left half done) the process group stay.

After a failed call each rank reports where it stands in the job's collectives. When every rank
stopped at the same place the process group is kept. Otherwise (a rank was stopped inside a
collective, or a connection broke) every rank forms the group again under fresh store keys:
ranks that ended first shut down their connections to the other ranks, which ends the
collective the others wait in even while a model holds the old group, and every rank then moves
its ``DistributedDataParallel`` models onto the new group (see ``worker/regroup.py``).
A rank that does not end its call within the stop grace, or cannot join the new group, breaks
the session (its processes are then stopped, and ``restart()`` starts new ones).
"""

from __future__ import annotations

import dataclasses
import signal

from ...protocol import results
from ...protocol import session_messages as protocol
from ...protocol.events import WorkerStopped
from ...protocol.failure import looks_secondary
from ...protocol.session_messages import CellInterrupted, Command, RankBusy, RankIdle
from ...protocol.status import RankStatus
from ..errors import RemoteTraceback, SessionBrokenError, interrupt_error
from ..planning.plan import LaunchPlan
from ..processes.signals import InterruptFlag, interrupts_noted
from ..supervision.group import WorkerGroup
from ..supervision.stacks import where_ranks_were
from ..supervision.supervisor import EXIT_GRACE, Supervisor
from ..supervision.watchdogs import Verdict
from .errors import RESTART_HINT, call_failed, outcome_text, with_outcome

SETTLE = 0.3  # seconds the other ranks get to end a failed call before the group is re-formed
# Once some ranks ended the call, a rank that has not ended this long after the last of them (and
# after its interrupt) is held in native code, most often a collective the ended ranks left: it
# can only end once the group is formed again, so the rest of SETTLE is not waited for.
HELD = 0.1
REFORM_LIMIT = 150.0  # seconds every rank has to join the re-formed group


class CallSupervisor(Supervisor):
    """Supervises call ``call`` of a session whose workers are ``group`` (``oom_baseline``: the
    out-of-memory kill counters read before it, as :class:`Supervisor` takes them).

    ``ended`` maps each rank that has finished the call (returned, raised or was stopped) to its
    :class:`RankIdle`; :meth:`on_event` fills it and must be one of the group's listeners.
    After the run, ``reformed`` says whether the process group was formed again and ``broken``
    why the session cannot go on (None: it can).
    """

    scope = "call"

    def __init__(
        self,
        group: WorkerGroup,
        plan: LaunchPlan,
        call: int,
        oom_baseline: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(
            group.handles,
            group.sink,
            plan.stall_timeout,
            plan.monitor_interval,
            stall_notice=plan.stall_notice,
            stop_grace=plan.stop_grace,
            group=group,
            oom_baseline=oom_baseline,
        )
        self.call = call
        self.ended: dict[int, RankIdle] = {}
        self.busy: set[int] = set()  # ranks that took the call (SIGINT reaches it from then)
        self._signalled: set[int] = set()  # ranks sent SIGINT for this call
        self._quiet_since: float | None = None  # the last interrupt sent or end seen, in settle
        self.joined: dict[int, RankIdle] = {}  # answers to the re-form command
        self.reformed = False
        self.broken: str | None = None

    def on_event(self, event: object) -> None:
        if isinstance(event, RankBusy) and event.call == self.call:
            self.busy.add(event.rank)
        elif isinstance(event, RankIdle) and event.call == self.call:
            if event.reformed or event.problem is not None:
                self.joined[event.rank] = event
            else:
                self.ended[event.rank] = event
                if self._quiet_since is not None:
                    self._quiet_since = self.clock()

    # -- the loop ---------------------------------------------------------------------------

    def run_call(self, deadline: float | None) -> list[results.Received | None]:
        """Supervise until every rank ended the call (their results, in rank order) or raise
        what went wrong, the call having been stopped on every rank."""
        with interrupts_noted() as interrupted:  # acted on between reads, never inside one
            wake = [] if interrupted.wake_fd is None else [interrupted.wake_fd]
            self.group.wake_fds = wake  # an interrupt ends the wait for the workers at once
            try:
                return self._run_call(deadline, interrupted)
            finally:
                self.group.wake_fds = []

    def _run_call(
        self, deadline: float | None, interrupted: InterruptFlag
    ) -> list[results.Received | None]:
        group = self.group
        watchdogs = self.all_watchdogs(deadline)
        while True:
            if interrupted.is_set():
                raise KeyboardInterrupt
            dead = [h for h in self.handles if h.exited]
            if dead:
                raise self._died(dead[0])
            if group.with_status(RankStatus.FAILED):
                raise self._failed()
            if len(self.ended) == len(self.handles):
                return [h.result for h in self.handles]
            self.turn(watchdogs, deadline)

    def _judged(self, verdict: Verdict) -> None:
        """A watchdog ended the call: stop it on every rank (the session stays) and raise."""
        self.settle(verdict.reason, verdict.blamed)
        raise verdict.error

    def _failed(self) -> BaseException:
        primary = self._primary()
        if primary.stopped_from_outside:  # a rank asked to end by someone else leaves the job
            self.group.await_exits([primary], EXIT_GRACE)
        if primary.exited:
            return self._died(primary)
        if primary.failed is not None and primary.failed.exc_type == CellInterrupted.type_name():
            # The interrupt reached the workers before the kernel's own KeyboardInterrupt.
            self.settle("interrupted", (), requested=True)
            return interrupt_error(interrupted_text(self))
        self.settle(f"rank {primary.rank} failed", (primary.rank,))
        dead = [h for h in self.handles if h.exited]
        if dead:  # a peer's death, seen after the connection error it caused here
            return self._died(dead[0])
        failure = dataclasses.replace(self._describe(primary), call=self.call)
        stopped = tuple(  # a rank that could not be stopped is named by the outcome
            h.rank for h in self.handles if h.status == RankStatus.STOPPED and h.rank in self.ended
        )
        completed = tuple(h.rank for h in self.handles if h.status == RankStatus.FINISHED)
        return call_failed(failure, stopped, completed)

    def _died(self, handle) -> SessionBrokenError:
        failure = self._describe(handle)
        self.broken = f"rank {handle.rank} died: {failure.message}"
        error = SessionBrokenError(
            f"rank {handle.rank} of the session died ({failure.exit}): "
            f"{failure.message.rstrip('. ')}. The session is broken: {RESTART_HINT}."
        )
        error.__cause__ = RemoteTraceback(failure.report(()))
        return error

    # -- stopping a call --------------------------------------------------------------------

    def settle(self, reason: str, blamed: tuple[int, ...], requested: bool = False) -> None:
        """Stop the call on every rank still in it, and leave the group usable: kept where every
        rank stopped at the same place in the job's collectives, else formed again. Sets
        ``broken`` when that cannot be done."""
        group = self.group
        for handle in self.handles:
            if handle.rank not in self.ended and handle.status.active:
                group.apply(handle, WorkerStopped(handle.rank, reason, requested, blamed))
        self._quiet_since = self.clock()
        self._await(self._stopped_or_held, SETTLE)
        if self._exited():
            return
        positions = {idle.position for idle in self.ended.values()}
        if len(self.ended) == len(self.handles) and len(positions) == 1 and not self._broke():
            return  # no collective was left half done: the group is kept
        self._reform()

    def _all_stopped(self) -> bool:
        """Interrupt each rank that has taken the call and not ended it (once; a rank is
        interrupted only once it took the call, as before that the signal is ignored);
        whether every rank has ended the call."""
        for handle in self.handles:
            rank = handle.rank
            if handle.taken is not None and handle.taken.value == self.call:
                self.busy.add(rank)
            if rank in self.busy and rank not in self.ended and rank not in self._signalled:
                self._signalled.add(rank)
                handle.send_signal(signal.SIGINT)  # the call raises KeyboardInterrupt there
                if self._quiet_since is not None:
                    self._quiet_since = self.clock()
        return len(self.ended) == len(self.handles)

    def _stopped_or_held(self) -> bool:
        """Whether every rank ended the call, or those left are held (see ``HELD``)."""
        if self._all_stopped():
            return True
        return bool(self.ended) and self.clock() - self._quiet_since >= HELD

    def _broke(self) -> bool:
        """Whether a rank failed with a communication error (its connections are gone)."""
        return any(
            h.failed is not None and looks_secondary(h.failed.exc_type, h.failed.message)
            for h in self.handles
        )

    def _reform(self) -> None:
        self.reformed = True
        command = Command(protocol.REFORM, self.call).to_bytes()
        for handle in self.handles:
            try:
                handle.commands.send_bytes(command)
            except OSError:
                self.broken = f"rank {handle.rank}'s process is gone"
                return
        # Ranks that ended close their connections as they form the new group, which ends a
        # collective the others wait in; those must then end within the stop grace.
        ended = self._await(self._all_stopped, self.group.stop_grace)
        if not ended:
            if not self._exited():
                stuck = [h.rank for h in self.handles if h.rank not in self.ended]
                where = where_ranks_were(self.group.collect_stacks(stuck))
                self.broken = (
                    f"rank {', '.join(map(str, stuck))} did not end the call within "
                    f"{self.group.stop_grace + SETTLE:g} s of being stopped (stuck outside "
                    f"Python?). {where}"
                ).rstrip()
            return
        if not self._await(lambda: len(self.joined) == len(self.handles), REFORM_LIMIT):
            if not self._exited():
                missing = [h.rank for h in self.handles if h.rank not in self.joined]
                self.broken = (
                    f"rank {', '.join(map(str, missing))} did not join the process group "
                    f"formed again within {REFORM_LIMIT:g} s"
                )
            return
        problems = [f"rank {i.rank}: {i.problem}" for i in self.joined.values() if i.problem]
        if problems:
            self.broken = (
                "the process group could not be formed again (" + "; ".join(problems) + ")"
            )

    def _await(self, done, limit: float) -> bool:
        """Read the workers until ``done()`` or ``limit`` seconds passed (or a rank died)."""
        end = self.clock() + limit
        while not done():
            left = end - self.clock()
            if left <= 0 or self._exited():
                return False
            self.group.pump(min(left, 0.05))
        return True

    def _exited(self) -> bool:
        dead = [h for h in self.handles if h.exited]
        if dead and self.broken is None:
            self.broken = f"rank {dead[0].rank}'s process ended (exit code {dead[0].exitcode})"
        return bool(dead)

    def outcome(self) -> str:
        """What this call left of the session, in one line (see :func:`outcome_text`)."""
        joined = self.joined.values() if self.reformed else ()
        rebound = max((i.rebound for i in joined), default=0)
        unbound = sorted({u for i in joined for u in i.unbound})
        return outcome_text(self.broken, self.reformed, rebound, unbound)


def interrupted_text(supervisor: CallSupervisor) -> str:
    return f"the cell was interrupted and stopped on every rank. {supervisor.outcome()}"


def with_session_notes(error: BaseException, supervisor: CallSupervisor) -> BaseException:
    """``error`` ending with what its call left of the session (usable or broken; a
    :class:`SessionBrokenError` says so itself)."""
    if isinstance(error, SessionBrokenError):
        return error
    return with_outcome(error, supervisor.outcome())
