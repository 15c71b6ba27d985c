"""Watches running workers from the kernel: events, output, exits, stalls and timeouts."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait

import psutil

from ..protocol import names, results
from ..protocol.channel import READ_CHUNK
from ..protocol.events import (
    RankQuiet,
    SupervisorTick,
    WorkerExited,
    WorkerFailed,
    WorkerFinished,
    WorkerStarted,
    WorkerStopped,
)
from ..protocol.failure import looks_secondary
from .errors import (
    AttemptFailed,
    DeadlockError,
    LaunchStoppedError,
    LaunchTimeoutError,
    WorkerFailure,
    WorkerStalledError,
    add_note,
    failure_to_raise,
)
from .launchers import WorkerHandle
from .output import OutputSink
from .processes import kill_tree
from .stacks import holding_up, locate, trim_kernel_frames, where_ranks_were

logger = logging.getLogger(__name__)
LIVENESS_CHECK_EVERY = 0.5  # seconds between CPU-time samples of each worker
CPU_ALIVE_THRESHOLD = 0.01  # CPU seconds per sample that count as a sign of life
EXIT_GRACE = 1.0  # how long a rank that reported its failure or result may take to exit
DRAIN_LIMIT = 1.0  # how long to wait for the last output of stopped workers
STACK_DUMP_WAIT = 2.0  # how long to wait for every rank's stack after asking for it
STACK_QUIET = 0.2  # a rank's stack is complete once it has been quiet this long
TICK_EVERY = 0.1  # seconds between the ticks listeners get while the run goes on
DEADLOCK_AFTER = 3.0  # seconds after a rank returned before the others' stacks are checked
DEADLOCK_RECHECK = 1.5  # seconds between the two stack samples that must agree


class Supervisor:
    """Runs one attempt of a launch to completion or teardown.

    Args:
        handles: the started workers, in rank order.
        sink: where output lines go.
        stall_timeout: seconds without output, events or CPU use after which a rank is stalled.
        monitor_interval: the longest the loop sleeps between checks.
        listeners: extra consumers of every event (notebook panels, tests).
        stop: when set, the run is torn down and :class:`LaunchStoppedError` raised.
        watch: called on every turn of the loop; when it returns an exception, every worker is
            stopped and that exception raised (multi-node launches: another node failed).
        deadlock_after: once a rank has returned for this many seconds while the others still
            run, their stacks are sampled; if every one of them waits in a collective at the
            same place in two samples ``DEADLOCK_RECHECK`` apart, the job is stopped with a
            :class:`DeadlockError` (a rank that returned never joins another collective).
            None disables the check (multi-node launches: the other nodes' ranks are unseen).
        stall_notice: seconds without a sign of life after which a rank is named in a notice
            (the sink's, and a :class:`RankQuiet` event) with where every rank is; once per
            quiet spell, nothing is stopped. None disables it.
    """

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
    ) -> None:
        self.handles = handles
        self.stop = stop
        self.watch = watch
        self.stop_reason = "interrupted"  # why teardown stops ranks that still run
        self.stop_requested = True  # ... whether the user asked for it (not an error)
        self.blamed: tuple[int, ...] = ()  # ... and the ranks held responsible
        self._next_tick = clock()
        self.sink = sink
        self.stall_timeout = stall_timeout
        self.monitor_interval = monitor_interval
        self.listeners = listeners
        self.clock = clock
        self._next_liveness = clock() + LIVENESS_CHECK_EVERY
        self.deadlock_after = deadlock_after
        self.stall_notice = stall_notice
        self._noticed: dict[int, float] = {}  # rank -> the last_alive of the spell noticed
        self._next_deadlock_check = clock()
        self._deadlock_places: dict | None = None  # the last sample of the waiting ranks
        self._by_conn = {}
        for handle in handles:
            if handle.closed:  # torn down already
                continue
            self._by_conn[handle.events] = handle
            for conn in handle.streams:
                self._by_conn[conn] = handle
        self._sentinels = {h.process.sentinel: h for h in handles}
        self._unreaped: set[WorkerHandle] = set()

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, deadline: float | None) -> list[results.Received]:
        """Supervise until every rank returned (their results, in rank order) or raise."""
        while True:
            failed = [h for h in self.handles if h.status == "failed"]
            if failed:
                error, failure = self._fail_fast()
                raise AttemptFailed(error, failure.headline())
            if all(h.status == "finished" for h in self.handles):
                values = [h.result for h in self.handles]
                self._finish()
                return values
            now = self.clock()
            if self.stop is not None and self.stop.is_set():
                raise self._stopped()
            stop_for = self.watch() if self.watch is not None else None
            if stop_for is not None:
                self.stop_reason, self.stop_requested = "another node failed", False
                self.teardown()
                raise stop_for
            if now >= self._next_tick:
                self._next_tick = now + TICK_EVERY
                alive = tuple((h.rank, h.last_alive) for h in self.handles)
                self._publish(SupervisorTick(now, alive))
            if deadline is not None and now >= deadline:
                raise self._timeout(now, deadline)
            stalled = self._stalled(now)
            if stalled:
                error = self._stall(stalled)
                raise AttemptFailed(error, str(error).splitlines()[0])
            deadlock = self._deadlocked(now)
            if deadlock is not None:
                raise AttemptFailed(deadlock, str(deadlock).splitlines()[0])
            wait_for = self.monitor_interval
            if deadline is not None:
                wait_for = max(0.0, min(wait_for, deadline - now))
            self._pump(wait_for)

    def _pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for anything from the workers and handle all of it."""
        ready = wait(self._waitables(), timeout)
        for obj in ready:  # pipes first, so a worker's last words are read before its exit
            if obj in self._by_conn:
                self._read(obj)
        for obj in ready:
            if obj in self._sentinels:
                self._exited(self._sentinels[obj])
        for handle in list(self._unreaped):
            self._exited(handle)

    def _waitables(self) -> list:
        objs = list(self._by_conn)
        objs += [s for s, h in self._sentinels.items() if not h.exited]
        return objs

    # -- reading ----------------------------------------------------------------------------------

    def _read(self, conn) -> None:
        handle = self._by_conn[conn]
        if conn is handle.events:
            try:
                event = conn.recv()
            except (EOFError, OSError):
                self._forget(conn)
                return
            self._event(handle, event)
            return
        try:
            chunk = os.read(conn.fileno(), READ_CHUNK)
        except OSError:
            chunk = b""
        splitter = handle.streams[conn]
        lines = splitter.feed(chunk) if chunk else splitter.close()
        if not chunk:
            self._forget(conn)
        handle.last_alive = self.clock()
        for line in lines:
            if handle.capture is not None:
                handle.capture.append(line.text)
                continue
            self.sink.write(line)
            self._publish(line)

    def _forget(self, conn) -> None:
        self._by_conn.pop(conn, None)

    def _event(self, handle: WorkerHandle, event: object) -> None:
        handle.last_alive = self.clock()
        if isinstance(event, WorkerStarted):
            handle.status, handle.pid = "running", event.pid
        elif isinstance(event, WorkerFinished):
            # Mapped at once, so the files are gone before anything can remove them.
            handle.status, handle.result = "finished", results.receive(event.payload)
            handle.finished_at = self.clock()
        elif isinstance(event, WorkerFailed):
            handle.status, handle.failed = "failed", event
        self._publish(event)

    def _exited(self, handle: WorkerHandle) -> None:
        handle.exitcode = _reap(handle.process)
        if handle.exitcode is None:
            # The sentinel fired but the process is not reapable (it closed the descriptor
            # itself, or a child inherited it): stop waiting on the sentinel, check each turn.
            self._sentinels.pop(handle.process.sentinel, None)
            self._unreaped.add(handle)
            return
        self._unreaped.discard(handle)
        while handle.events in self._by_conn and handle.events.poll(0):
            self._read(handle.events)
        if handle.status in ("starting", "running"):
            handle.status = "failed"  # died without a word: a crash, a signal or os._exit
        self._publish(WorkerExited(handle.rank, handle.exitcode))

    def _publish(self, event: object) -> None:
        for listener in self.listeners:
            listener(event)

    # -- endings ----------------------------------------------------------------------------------

    def _finish(self) -> None:
        """Every rank returned: let them exit, collect their last output."""
        self._await_exits([h for h in self.handles if not h.exited], EXIT_GRACE)
        self.teardown()

    def _fail_fast(self) -> tuple[BaseException, WorkerFailure]:
        self._pump(0)  # whatever else already arrived decides which failure came first
        failed = [h for h in self.handles if h.status == "failed"]
        primary = min(failed, key=_failure_order)
        others = [h for h in self.handles if h is not primary and h.status != "finished"]
        self._stop(others, f"rank {primary.rank} failed", blamed=(primary.rank,))
        self._await_exits([primary], EXIT_GRACE)
        self.teardown()
        failure = self._describe(primary)
        error = failure_to_raise(failure, tuple(h.rank for h in others))
        returned = [h.rank for h in self.handles if h.status == "finished"]
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

    def _describe(self, handle: WorkerHandle) -> WorkerFailure:
        known = dict(
            local_rank=handle.local_rank,
            pid=handle.pid,
            exitcode=handle.exitcode,
            last_lines=self.sink.tail(handle.rank),
            node_rank=handle.node_rank,
        )
        if handle.failed is not None:
            return WorkerFailure.from_event(handle.failed, **known)
        # Died without a word: the crash report stands in for a traceback.
        crash = "\n".join(trim_kernel_frames(self.sink.crash_report(handle.rank)))
        return WorkerFailure(
            rank=handle.rank,
            exc_type=None,
            message="the process ended without returning or raising (crash, signal or os._exit)",
            traceback=crash,
            **known,
        )

    def _stalled(self, now: float) -> list[WorkerHandle]:
        if self.stall_timeout is None and self.stall_notice is None:
            return []
        if now < self._next_liveness:
            return []
        self._next_liveness = now + LIVENESS_CHECK_EVERY
        for handle in self.handles:
            if handle.exited or handle.status == "finished":
                continue
            cpu = _cpu_seconds(handle.pid)
            if cpu - handle.cpu_seen >= CPU_ALIVE_THRESHOLD:
                handle.last_alive = now
            handle.cpu_seen = max(handle.cpu_seen, cpu)
        limit = self.stall_timeout
        if limit is None:
            self._notice_quiet(now)
            return []
        if not any(
            h.status in ("starting", "running") and now - h.last_alive >= limit
            for h in self.handles
        ):
            self._notice_quiet(now)
        return [
            h
            for h in self.handles
            if h.status in ("starting", "running") and now - h.last_alive >= limit
        ]

    def _notice_quiet(self, now: float) -> None:
        """Name, once per quiet spell, every rank quiet for ``stall_notice`` seconds, with where
        each rank is; nothing is stopped."""
        limit = self.stall_notice
        if limit is None:
            return
        quiet = [
            h
            for h in self.handles
            if h.status in ("starting", "running")
            and now - h.last_alive >= limit
            and self._noticed.get(h.rank) != h.last_alive
        ]
        if not quiet:
            return
        stacks = self._collect_stacks()
        quiet = [h for h in quiet if h.status in ("starting", "running")]
        for handle in quiet:
            self._noticed[handle.rank] = handle.last_alive
            place = locate(stacks.get(handle.rank, ""))
            where = place.describe() if place else "at an unknown place (no stack)"
            self._publish(RankQuiet(handle.rank, now - handle.last_alive, where, handle.last_alive))
        if quiet:
            ranks = ", ".join(str(h.rank) for h in quiet)
            until = (
                f"stall_timeout={self.stall_timeout:g} s stops the run"
                if self.stall_timeout is not None
                else "stall_timeout=None: nothing will stop it"
            )
            self.sink.notice(
                f"notebook_launcher: rank {ranks} has shown no sign of life (no output, no "
                f"events, no CPU use) for {limit:g} s; nothing was stopped ({until}). "
                f"{where_ranks_were(stacks)}"
            )

    def _stall(self, stalled: list[WorkerHandle]) -> BaseException:
        ranks = tuple(h.rank for h in stalled)
        stacks = self._collect_stacks()
        limit = self.stall_timeout
        message = (
            f"rank {', '.join(str(r) for r in ranks)} showed no sign of life (no output, no "
            f"events, no CPU use) for {limit:g} s (stall_timeout={limit:g}); all ranks were "
            f"stopped. {where_ranks_were(stacks)} Pass a larger stall_timeout, or None, if a "
            "rank legitimately waits that long."
        )
        # Shown once, by the error (or by the restart notice when a restart follows).
        self.stop_reason, self.stop_requested = "stall_timeout expired", False
        self.blamed = holding_up(stacks) or ranks
        self.teardown()
        return WorkerStalledError(message, stacks, ranks)

    def _deadlocked(self, now: float) -> BaseException | None:
        """A :class:`DeadlockError` once a rank returned and every other waits in a collective
        at the same place in two samples; else None."""
        if self.deadlock_after is None or now < self._next_deadlock_check:
            return None
        returned = [h for h in self.handles if h.status == "finished"]
        waiting = [h for h in self.handles if h.status in ("starting", "running")]
        if not returned or not waiting:
            return None
        since = min(h.finished_at if h.finished_at is not None else now for h in returned)
        if now - since < self.deadlock_after:
            self._next_deadlock_check = since + self.deadlock_after
            return None
        self._next_deadlock_check = now + DEADLOCK_RECHECK
        stacks = self._collect_stacks()
        if any(h.status not in ("starting", "running") for h in waiting):
            return None  # one finished or failed meanwhile: the loop handles it
        places = {h.rank: locate(stacks.get(h.rank, "")) for h in waiting}
        if not all(
            p is not None and p.in_collective and not p.in_rendezvous for p in places.values()
        ):
            self._deadlock_places = None
            return None
        if places != self._deadlock_places:
            self._deadlock_places = places  # the first sample: the second must agree
            return None
        gone = ", ".join(str(h.rank) for h in returned)
        held = ", ".join(str(h.rank) for h in waiting)
        message = (
            f"rank {gone} returned while rank {held} waited for it in a collective (at the "
            f"same place in two samples {DEADLOCK_RECHECK:g} s apart): a certain deadlock, so "
            f"all ranks were stopped. {where_ranks_were(stacks)} Every rank must take part in "
            "each collective the others call: a rank that returns early (or skips a "
            "collective under an if) leaves the others waiting forever."
        )
        # Shown once, by the error.
        self.stop_reason, self.stop_requested = "certain deadlock", False
        self.blamed = tuple(h.rank for h in returned)
        self.teardown()
        return DeadlockError(
            message, stacks, tuple(h.rank for h in waiting), tuple(h.rank for h in returned)
        )

    def _timeout(self, now: float, deadline: float) -> BaseException:
        stacks = self._collect_stacks()
        message = (
            f"the launch exceeded its timeout; all ranks were stopped. {where_ranks_were(stacks)}"
        )
        self.stop_reason, self.stop_requested = "timeout expired", False
        self.blamed = holding_up(stacks)
        self.teardown()
        return LaunchTimeoutError(message, stacks)

    def _stopped(self) -> BaseException:
        self.stop_reason = "stop requested"
        self.teardown()
        return LaunchStoppedError(
            f"the launch was stopped on request; all {len(self.handles)} processes were stopped"
        )

    def _collect_stacks(self) -> dict[int, str]:
        """Ask every live rank for its Python stacks (all threads, kernel frames trimmed)."""
        alive = [h for h in self.handles if not h.exited and h.status != "finished"]
        # Dumping a stack is not a sign of life: the quiet times are kept as they were.
        quiet_since = {h: h.last_alive for h in alive}
        for handle in alive:
            handle.capture = []
            try:
                os.kill(handle.pid, names.STACK_DUMP_SIGNAL)
            except (OSError, TypeError):
                pass
        end = self.clock() + STACK_DUMP_WAIT
        while self.clock() < end:
            now = self.clock()
            if all(h.capture and now - h.last_alive >= STACK_QUIET for h in alive):
                break
            self._pump(min(STACK_QUIET / 2, max(0.0, end - now)))
        stacks = {h.rank: "\n".join(trim_kernel_frames(h.capture or [])) for h in alive}
        for handle in alive:
            handle.capture = None
            handle.last_alive = quiet_since[handle]
            handle.cpu_seen = max(handle.cpu_seen, _cpu_seconds(handle.pid))
        return stacks

    def teardown(self) -> None:
        """Kill every worker still running, read what they left in the pipes, release everything.

        Safe to call more than once and from any exit path.
        """
        running = [h for h in self.handles if not h.exited and h.status in ("starting", "running")]
        self._stop(running, self.stop_reason, self.stop_requested, self.blamed)
        for handle in self.handles:  # and whatever the others left running
            kill_tree(handle.pid)
        self._await_exits([h for h in self.handles if not h.exited], DRAIN_LIMIT)
        end = self.clock() + DRAIN_LIMIT
        while any(c for c in self._by_conn if c is not self._by_conn[c].events):
            left = end - self.clock()
            if left <= 0:
                break
            self._pump(left)
        for handle in self.handles:
            handle.process.join(DRAIN_LIMIT)
            handle.exitcode = handle.process.exitcode
            handle.result = None  # run() handed over the results; a failed run keeps none mapped
            handle.close()
        self._by_conn.clear()
        # Workers unlink their shared-memory exchange at once; one that died first cannot.
        names.remove_leftovers(os.getpid())
        logger.debug("teardown: all %d processes gone, pipes closed", len(self.handles))

    def _stop(
        self,
        handles: list[WorkerHandle],
        reason: str,
        requested: bool = False,
        blamed: tuple[int, ...] = (),
    ) -> None:
        """Kill the ranks of ``handles``, which still run, and tell the listeners why
        (``requested``: the user asked; ``blamed``: the ranks held responsible)."""
        if handles:
            logger.info("stopping rank %s (%s)", ", ".join(str(h.rank) for h in handles), reason)
        for handle in handles:
            kill_tree(handle.pid)
            handle.status = "stopped"
            self._publish(WorkerStopped(handle.rank, reason, requested, blamed))

    def _await_exits(self, handles: list[WorkerHandle], limit: float) -> None:
        end = self.clock() + limit
        while any(not h.exited for h in handles):
            left = end - self.clock()
            if left <= 0:
                for handle in handles:
                    if not handle.exited:
                        logger.info("rank %d did not exit within %g s: killed", handle.rank, limit)
                        kill_tree(handle.pid)
                        handle.process.join(DRAIN_LIMIT)
                        handle.exitcode = handle.process.exitcode
                return
            self._pump(min(left, 0.05))


def _reap(process, patience: float = 0.05) -> int | None:
    """The exit code of a process whose sentinel fired, waiting briefly for it to be reapable.

    The sentinel fires when the worker's end of it closes, a moment before the process can be
    collected; polling here instead of returning to the loop avoids spinning on a ready sentinel.
    """
    deadline = time.monotonic() + patience
    while True:
        process.join(0)
        if process.exitcode is not None or time.monotonic() >= deadline:
            return process.exitcode
        time.sleep(0.0005)


def _failure_order(handle: WorkerHandle) -> tuple[int, float]:
    """Sort key: the root cause first.

    A rank whose peer died usually fails too, with a communication error, moments later; such
    secondary failures sort after a real exception or a crash.
    """
    event = handle.failed
    if event is None:
        return (0, float("-inf"))
    return (1 if looks_secondary(event.exc_type, event.message) else 0, event.time)


def _cpu_seconds(pid: int | None) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, TypeError, ValueError):
        return 0.0
    return times.user + times.system + times.children_user + times.children_system
