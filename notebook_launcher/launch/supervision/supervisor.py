"""Runs one attempt: the worker group, measured for work, judged by the watchdogs, until it ends."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from ...protocol import results
from ...protocol.events import SupervisorTick
from ...protocol.failure import looks_secondary
from ...protocol.status import RankStatus
from ..errors import AttemptFailed, LaunchStoppedError, WorkerFailure, add_note, failure_to_raise
from ..launchers import WorkerHandle
from .group import STOP_GRACE, WorkerGroup
from .liveness import SAMPLE_EVERY, Usage, WorkMeter, measure
from .oom import killed_for_memory, memory_text, oom_kills
from .output import OutputSink
from .prompting import Prompter, cell_answerer
from .stacks import trim_kernel_frames
from .watchdogs import DEADLOCK_AFTER, DeadlockWatchdog, StallWatchdog, TimeoutWatchdog, Verdict

OUTSIDE_STOP = (
    "this rank got a SIGTERM the launcher did not send: another process or the system stopped it "
    "(kill, a job scheduler, a container or node shutting down)"
)
DEATH_NOTICE = 5.0  # seconds a blamed secondary failure waits for a dying peer's end to be known
EXIT_GRACE = 1.0  # how long a rank that reported its failure or result may take to exit
TICK_EVERY = 0.1  # seconds between the ticks listeners get while the run goes on
FIRST_SAMPLE = SAMPLE_EVERY  # seconds into a run before the ranks' resource use is sampled

__all__ = ["DEADLOCK_AFTER", "STOP_GRACE", "Supervisor"]


class Supervisor:
    """Runs one attempt of a launch to completion or teardown.

    Args:
        handles: the started workers, in rank order.
        sink: where output lines go.
        stall_timeout: seconds without progress of any rank (see :mod:`.liveness`) after which
            the job is stopped with a :class:`WorkerStalledError`; None: never.
        monitor_interval: the longest the loop sleeps between checks.
        listeners: extra consumers of every event (notebook panels, tests).
        clock: monotonic seconds.
        stop: when set, the run is torn down and :class:`LaunchStoppedError` raised.
        watch: called on every turn of the loop; when it returns an exception, every worker is
            stopped and that exception raised (multi-node launches: another node failed).
        deadlock_after: seconds after a rank returned before the others are checked for a
            certain deadlock (see :class:`DeadlockWatchdog`); None disables the check
            (multi-node launches: the other nodes' ranks are unseen).
        stall_notice: quiet seconds after which the ranks are named in a notice, once per
            quiet spell; nothing is stopped. None disables it.
        stop_grace: seconds a rank being stopped has to run its ``finally`` blocks and
            ``atexit`` handlers before it is killed.
        probe: measures a rank's processes (``pid -> Usage``); tests pass a scripted one.
        group: the worker group of ``handles`` where it outlives this supervisor (a session's
            workers, supervised call by call); default: a new one.
        oom_baseline: the out-of-memory kill counters (:func:`oom_kills`) read before the run,
            which a rank's unexplained SIGKILL is compared with; default: read now.
    """

    scope = "launch"  # what a watchdog's verdict stops (a session's calls: "call")

    def __init__(
        self,
        handles: list[WorkerHandle],
        sink: OutputSink,
        stall_timeout: float | None,
        monitor_interval: float,
        listeners: tuple[Callable[[object], None], ...] = (),
        clock: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
        watch: Callable[[], BaseException | None] | None = None,
        deadlock_after: float | None = DEADLOCK_AFTER,
        stall_notice: float | None = None,
        stop_grace: float = STOP_GRACE,
        probe: Callable[[int | None], Usage | None] = measure,
        group: WorkerGroup | None = None,
        oom_baseline: tuple[int, ...] | None = None,
    ) -> None:
        self.group = group or WorkerGroup(handles, sink, listeners, clock, stop_grace)
        self.handles = handles
        self.sink = sink
        self.clock = clock
        self.stop = stop
        self.watch = watch
        self.monitor_interval = monitor_interval
        self.meter = WorkMeter(probe)
        self.watchdogs: list = [StallWatchdog(self.group, stall_timeout, stall_notice, self.scope)]
        if deadlock_after is not None:
            self.watchdogs.append(DeadlockWatchdog(self.group, deadlock_after, self.scope))
        self.stop_reason = "interrupted"  # why teardown stops ranks that still run
        self.stop_requested = True  # ... whether the user asked for it (not an error)
        self.blamed: tuple[int, ...] = ()  # ... and the ranks held responsible
        # The ranks' resource use is sampled only once the run is FIRST_SAMPLE old: a short
        # run (a session's quick call) never pays for it.
        self._next_tick = clock()
        self._next_sample = self._next_tick + FIRST_SAMPLE
        self._oom_kills = oom_kills() if oom_baseline is None else oom_baseline
        self.prompter = Prompter(self.group, cell_answerer(), self._before_prompt)
        self._held_at: float | None = None  # since when a rank's prompt holds the clocks
        self._timeout_watch: TimeoutWatchdog | None = None

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, deadline: float | None) -> list[results.Received]:
        """Supervise until every rank returned (their results, in rank order) or raise."""
        group = self.group
        watchdogs = self.all_watchdogs(deadline)
        while True:
            if group.with_status(RankStatus.FAILED):
                error, failure = self._fail_fast()
                raise AttemptFailed(error, failure.headline())
            if all(h.status == RankStatus.FINISHED for h in self.handles):
                values = [h.result for h in self.handles]
                group.await_exits([h for h in self.handles if not h.exited], EXIT_GRACE)
                self.teardown()
                return values
            if self.stop is not None and self.stop.is_set():
                self.stop_reason = "stop requested"
                self.teardown()
                raise LaunchStoppedError(
                    f"the launch was stopped on request; all {len(self.handles)} processes "
                    "were stopped"
                )
            stop_for = self.watch() if self.watch is not None else None
            if stop_for is not None:
                self._end("another node failed", ())
                raise stop_for
            self.turn(watchdogs, deadline)

    def all_watchdogs(self, deadline: float | None) -> list:
        """The watchdogs of a run ending at ``deadline``: its timeout's, then the others."""
        self._timeout_watch = TimeoutWatchdog(self.group, deadline, self.scope)
        return [self._timeout_watch, *self.watchdogs]

    def turn(self, watchdogs: list, deadline: float | None) -> None:
        """One turn of the loop once nothing has ended: measure the ranks, tell the listeners,
        let each watchdog judge (a verdict goes to :meth:`_judged`, which raises), then read
        the workers until the next turn, and answer a rank's prompt if one waits."""
        now = self.clock()
        self._hold(now)
        self._measure(now)
        self._tick(now)
        for watchdog in watchdogs:
            verdict = watchdog.check(now)
            if verdict is not None:
                self._judged(verdict)
        wait_for = self.monitor_interval
        if self._timeout_watch is not None and self._timeout_watch.deadline is not None:
            wait_for = max(0.0, min(wait_for, self._timeout_watch.deadline - now))
        self.group.pump(wait_for)
        if self.prompter.waiting():
            self._hold(self.clock())
            self.prompter.serve()
            self._hold(self.clock())

    def _before_prompt(self) -> None:
        """A tick just before the cell blocks on a prompt: views redraw on ticks."""
        self._tick(self.clock(), force=True)

    def _hold(self, now: float) -> None:
        """While a rank waits at a prompt, time stands still for every limit (``timeout``, the
        stall notice and ``stall_timeout``, the deadlock check), for it and for the ranks that
        wait for it: the time since the last look is added to each of them."""
        if self._held_at is not None and now > self._held_at:
            self.shift(now - self._held_at, now)
        self._held_at = now if self.prompter.waiting() else None

    def shift(self, seconds: float, now: float) -> None:
        """Move every time limit of the run ``seconds`` later (the ranks' last signs of life no
        later than ``now``)."""
        for handle in self.handles:
            handle.last_alive = min(handle.last_alive + seconds, now)
            if handle.finished_at is not None:
                handle.finished_at = min(handle.finished_at + seconds, now)
        self._next_sample += seconds
        for watchdog in [self._timeout_watch, *self.watchdogs]:
            if watchdog is not None:
                watchdog.shift(seconds)

    def _measure(self, now: float) -> None:
        """Every ``SAMPLE_EVERY`` seconds: a rank whose processes worked shows a sign of life."""
        if now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_EVERY
        for handle in self.group.active():
            if self.meter.worked(handle.rank, handle.local_pid, now):
                handle.last_alive = now

    def _tick(self, now: float, force: bool = False) -> None:
        if force or now >= self._next_tick:
            self._next_tick = now + TICK_EVERY
            alive = tuple((h.rank, h.last_alive) for h in self.handles)
            self.group.publish(SupervisorTick(now, alive))

    def _judged(self, verdict: Verdict) -> None:
        """Stop everything as a watchdog decided, and raise its error."""
        self._end(verdict.reason, verdict.blamed)
        if not verdict.restartable:
            raise verdict.error
        raise AttemptFailed(verdict.error, str(verdict.error).splitlines()[0])

    def _end(self, reason: str, blamed: tuple[int, ...]) -> None:
        self.stop_reason, self.stop_requested, self.blamed = reason, False, blamed
        self.teardown()

    def teardown(self) -> None:
        """Stop every rank still at work, kill what is left, release everything.

        Safe to call more than once and from any exit path.
        """
        self.group.teardown(self.stop_reason, self.stop_requested, self.blamed)

    # -- a failed rank ----------------------------------------------------------------------------

    def _fail_fast(self) -> tuple[BaseException, WorkerFailure]:
        group = self.group
        primary = self._primary()
        # Ranks that failed only because the primary did (a closed connection) count as
        # stopped by it too: the panels blame the primary, the report lists them.
        others = [h for h in self.handles if h is not primary and h.status != RankStatus.FINISHED]
        stopped = tuple(h.rank for h in others)
        group.stop(others, f"rank {primary.rank} failed", blamed=(primary.rank,))
        group.await_exits([primary], EXIT_GRACE)
        self._end(f"rank {primary.rank} failed", (primary.rank,))
        failure = self._describe(primary)
        error = failure_to_raise(failure, stopped)
        returned = [h.rank for h in group.with_status(RankStatus.FINISHED)]
        if returned and failure.exc_type and looks_secondary(failure.exc_type, failure.message):
            # gloo: the peer that returned closed its connections, which is what this rank saw.
            note = (
                f"rank {', '.join(map(str, returned))} had already returned: rank "
                f"{primary.rank} most likely waited for it in a collective it never joined. "
                "Every rank must take part in each collective the others call."
            )
            self.sink.notice(f"notebook_launcher: {note}")
            add_note(error, note)
        return error, failure

    def _primary(self) -> WorkerHandle:
        """The failed rank to blame: the root cause first (see :func:`failure_order`).

        A rank that failed only because a peer's connection closed is blamed only once no peer
        is still dying unseen: on a cluster the connection of a killed rank closes at once, and
        Ray tells its end moments later.
        """
        group = self.group
        group.pump(0)  # whatever else already arrived decides which failure came first
        primary = min(group.with_status(RankStatus.FAILED), key=failure_order)
        if primary.stopped_from_outside and any(h.status.active for h in self.handles):
            # Stopped by a signal nobody here sent while others run: let the launcher learn
            # why (a scheduler ending the job after it lost another node) before blaming it.
            primary.outside_stop()
            group.pump(0)
            primary = min(group.with_status(RankStatus.FAILED), key=failure_order)
        end = self.clock() + DEATH_NOTICE
        while failure_order(primary)[0] and any(h.ending() for h in self.handles):
            left = end - self.clock()
            if left <= 0:
                break
            group.pump(min(left, 0.05))
            primary = min(group.with_status(RankStatus.FAILED), key=failure_order)
        return primary

    def _describe(self, handle: WorkerHandle) -> WorkerFailure:
        known = dict(
            local_rank=handle.local_rank,
            pid=handle.pid,
            exitcode=handle.exitcode,
            last_lines=self.sink.tail(handle.rank),
            node_rank=handle.node_rank,
            node=handle.node,
        )
        if handle.failed is not None:
            failure = WorkerFailure.from_event(handle.failed, **known)
            if handle.stopped_from_outside:
                return self._stopped_from_outside(handle, failure)
            return failure
        # Died without a word: the crash report stands in for a traceback.
        crash = "\n".join(trim_kernel_frames(self.sink.crash_report(handle.rank)))
        return WorkerFailure(
            rank=handle.rank,
            exc_type=None,
            message=self._death(handle),
            traceback=crash,
            ended=handle.ended_as(),
            **known,
        )

    def _stopped_from_outside(self, handle: WorkerHandle, failure: WorkerFailure) -> WorkerFailure:
        """A rank that reported the stop signal this kernel never sent it: what the launcher
        knows of its end (a lost node, whose shutdown sent it) or who else may have sent it."""
        told = handle.outside_stop()
        if told is not None:
            return dataclasses.replace(failure, exc_type=None, message=told, payload=None)
        return dataclasses.replace(failure, message=OUTSIDE_STOP)

    def _death(self, handle: WorkerHandle) -> str:
        """Why a rank's process ended without returning or raising, as far as can be told."""
        told = handle.death()
        if told is not None:
            return told
        memory = memory_text(self.meter.rss.get(handle.rank))
        oom = killed_for_memory(handle.exitcode, self._oom_kills)
        if oom:
            return (
                "the process was killed by the out-of-memory killer: the machine (or its "
                f"container) ran out of memory. Its last measured memory use was {memory}; "
                "use smaller batches or fewer processes, or free memory in the kernel first"
            )
        text = "the process ended without returning or raising (crash, signal or os._exit)"
        if oom is None:  # a SIGKILL the launcher did not send, and no counter to ask
            text += (
                f"; a SIGKILL nobody sent is most often the out-of-memory killer (its last "
                f"measured memory use was {memory})"
            )
        return text


def failure_order(handle: WorkerHandle) -> tuple[int, float]:
    """Sort key: the root cause first.

    A rank whose peer died usually fails too, with a communication error, moments later; such
    secondary failures sort after a real exception or a crash.
    """
    event = handle.failed
    if event is None:
        return (0, float("-inf"))
    # A rank stopped by a signal this kernel never sent (Slurm ending a step after it lost
    # another node, an administrator) is a bystander of whatever happened elsewhere.
    secondary = handle.stopped_from_outside or looks_secondary(event.exc_type, event.message)
    return (1 if secondary else 0, event.time)
