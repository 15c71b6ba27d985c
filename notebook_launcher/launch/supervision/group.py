"""The kernel's side of one attempt's workers: read them, notice exits, stop them, release them."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import time
from collections.abc import Callable, Collection

from ...protocol import names, shared_files
from ...protocol.channel import READ_CHUNK
from ...protocol.events import (
    EventBatch,
    OutputLine,
    WorkerExited,
    WorkerFinished,
    WorkerStarted,
    WorkerStopped,
)
from ...protocol.prompts import InputRequest
from ...protocol.status import RankStatus, next_status
from ..launchers import WorkerHandle
from ..planning.settings import DEFAULTS
from ..processes.poller import Poller
from .output import OutputSink
from .stacks import trim_kernel_frames

logger = logging.getLogger(__name__)
STOP_GRACE = DEFAULTS.stop_grace  # seconds a stopped rank has for its finally blocks
DRAIN_LIMIT = 1.0  # how long to wait for the last output of stopped workers
STACK_DUMP_WAIT = 2.0  # how long to wait for every rank's stack after asking for it
STACK_QUIET = 0.2  # a rank's stack is complete once it has been quiet this long
# A line of a stack dump (faulthandler's format): the only stderr lines a dump captures.
_DUMP_LINE = re.compile(r'(Current thread|Thread) 0x|  (File "|<no Python frame>|\.\.\.)|\s*$')


class WorkerGroup:
    """Every worker of one attempt, as the kernel sees them.

    Reads their events and output (output goes to ``sink``; every event, and every output line,
    to ``listeners``), records each rank's status (:func:`next_status`) and its last sign of
    life (``handle.last_alive``: an event or a line of output), stops ranks gracefully and tears
    everything down.

    Args:
        handles: the started workers, in rank order.
        sink: where output lines and notices go.
        listeners: consumers of every event (the supervisor's views, tests).
        clock: monotonic seconds.
        stop_grace: seconds a rank being stopped has to exit after its catchable signal
            (KeyboardInterrupt in its main thread, so ``finally`` and ``atexit`` run) before
            it and everything it started are killed.
    """

    def __init__(
        self,
        handles: list[WorkerHandle],
        sink: OutputSink,
        listeners: tuple[Callable[[object], None], ...] = (),
        clock: Callable[[], float] = time.monotonic,
        stop_grace: float = STOP_GRACE,
    ) -> None:
        self.handles = handles
        self.sink = sink
        self.listeners = listeners
        self.clock = clock
        self.stop_grace = stop_grace
        self._by_conn = {}
        for handle in handles:
            if handle.closed:  # torn down already
                continue
            self._by_conn[handle.events] = handle
            for conn in handle.streams:
                self._by_conn[conn] = handle
        self._sentinels = {h.process.sentinel: h for h in handles}
        self._unreaped: set[WorkerHandle] = set()
        self._signalled: set[WorkerHandle] = set()  # sent the catchable stop signal
        self._poller = Poller()
        self.wake_fds: list[int] = []  # also waited on: readable when the wait should end
        # Sinks that hold lines write them once the pump handled what it read (a sink that
        # writes each line at once has nothing to flush).
        self._flush_output = getattr(sink, "flush", _nothing)

    # -- views --------------------------------------------------------------------------------

    def active(self) -> list[WorkerHandle]:
        """The ranks still starting or running."""
        return [h for h in self.handles if h.status.active]

    def with_status(self, status: RankStatus) -> list[WorkerHandle]:
        return [h for h in self.handles if h.status == status]

    def last_progress(self) -> float:
        """The latest sign of life of any rank (a rank that returned counts: it progressed)."""
        return max(h.last_alive for h in self.handles)

    # -- reading ------------------------------------------------------------------------------

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for anything from the workers and handle all of it (the
        output lines read are written out together, once)."""
        ready = self._poller.wait(self.waitables(), timeout)
        try:
            for obj in ready:  # pipes first, so a worker's last words are read before its exit
                if obj in self._by_conn:
                    self._read(obj)
            for obj in ready:
                if obj in self._sentinels:
                    self._exited(self._sentinels[obj])
            for handle in list(self._unreaped):
                self._exited(handle)
            for obj in ready:
                if obj in self.wake_fds:
                    with contextlib.suppress(OSError):
                        os.read(obj, 64)
        finally:
            self._flush_output()

    def waitables(self) -> list:
        """What :meth:`pump` waits on: the open pipes and the live processes' sentinels."""
        objs = list(self._by_conn)
        objs += [s for s, h in self._sentinels.items() if not h.exited]
        return objs + self.wake_fds

    def _read(self, conn) -> None:
        handle = self._by_conn[conn]
        if conn is handle.events:
            try:
                event = conn.recv()
            except (EOFError, OSError):
                self._by_conn.pop(conn, None)
                return
            handle.last_alive = self.clock()
            if isinstance(event, EventBatch):
                for each in event.events:
                    self.apply(handle, each)
            else:
                self.apply(handle, event)
            return
        try:
            chunk = os.read(conn.fileno(), READ_CHUNK)
        except OSError:
            chunk = b""
        splitter = handle.streams[conn]
        lines = splitter.feed(chunk) if chunk else splitter.close()
        if not chunk:
            self._by_conn.pop(conn, None)
        if handle.capture is not None:  # a stack being dumped: not a sign of life
            dumped = [line for line in lines if _is_stack_dump(line)]
            handle.capture.extend(line.text for line in dumped)
            lines = [line for line in lines if line not in dumped]
        if lines:
            handle.last_alive = self.clock()
        for line in lines:
            self.sink.write(line)
            self.publish(line)

    def apply(self, handle: WorkerHandle, event: object) -> None:
        """Fold ``event`` into ``handle``'s status and tell the listeners."""
        status = next_status(handle.status, event)
        if isinstance(event, WorkerStarted):
            handle.pid = event.pid
        elif isinstance(event, WorkerFinished) and status is not handle.status:
            # Mapped at once, so the files are gone before anything can remove them.
            handle.result = handle.receive(event.payload)
            handle.finished_at = self.clock()
        elif status is RankStatus.FAILED and handle.status.active:
            handle.failed = event if not isinstance(event, WorkerExited) else None
        if getattr(event, "exc_type", None) == names.STOPPED_TYPE and handle not in self._signalled:
            handle.stopped_from_outside = True  # (a session's rank between calls, too)
        if isinstance(event, InputRequest):
            handle.prompt = event  # answered by the supervising cell (see .prompting)
        elif not status.active:
            handle.prompt = None
        handle.status = status
        self.publish(event)

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
        self.apply(handle, WorkerExited(handle.rank, handle.exitcode))

    def begin_call(self, started: float) -> None:
        """A session's next call starts at ``started`` (monotonic): each rank is running again,
        with nothing of the last call's outcome left on its handle, and its reports and
        ``result.output()`` holding the new call's lines only."""
        self.sink.begin_call()
        for handle in self.handles:
            handle.result = handle.failed = handle.finished_at = None
            handle.last_alive = started
            self.apply(handle, WorkerStarted(handle.rank, handle.pid, time.time()))

    def publish(self, event: object) -> None:
        for listener in self.listeners:
            listener(event)

    # -- stacks -------------------------------------------------------------------------------

    def collect_stacks(self, ranks: Collection[int] | None = None) -> dict[int, str]:
        """Ask every rank still at work (or those of ``ranks`` whose process lives) for its
        Python stacks (all threads, kernel frames trimmed). Dumping a stack is not a sign of
        life: ``last_alive`` is left as it was."""
        alive = [
            h
            for h in self.handles
            if not h.exited and (h.status.active if ranks is None else h.rank in ranks)
        ]
        for handle in alive:
            handle.capture = []
            handle.send_signal(names.STACK_DUMP_SIGNAL)
        end = self.clock() + STACK_DUMP_WAIT
        settled_at: dict[WorkerHandle, tuple[int, float]] = {}
        while self.clock() < end:
            now = self.clock()
            for handle in alive:  # complete once no new line came for STACK_QUIET
                count = len(handle.capture or ())
                if settled_at.get(handle, (-1, 0.0))[0] != count:
                    settled_at[handle] = (count, now)
            if all(
                handle.capture and now - settled_at[handle][1] >= STACK_QUIET
                for handle in alive
                if handle.status.active or ranks is not None
            ):
                break
            self.pump(min(STACK_QUIET / 2, max(0.0, end - now)))
        stacks = {h.rank: "\n".join(trim_kernel_frames(h.capture or [])) for h in alive}
        for handle in alive:
            handle.capture = None
        return stacks

    # -- stopping -----------------------------------------------------------------------------

    def stop(
        self,
        handles: list[WorkerHandle],
        reason: str,
        requested: bool = False,
        blamed: tuple[int, ...] = (),
    ) -> None:
        """Ask the ranks of ``handles``, still at work, to stop, and tell the listeners why
        (``requested``: the user asked; ``blamed``: the ranks held responsible). Each gets
        the catchable stop signal now; :meth:`teardown` kills what is left after the grace."""
        if handles:
            logger.info("stopping rank %s (%s)", ", ".join(str(h.rank) for h in handles), reason)
        for handle in handles:
            self._signal(handle)
            self.apply(handle, WorkerStopped(handle.rank, reason, requested, blamed))

    def _signal(self, handle: WorkerHandle) -> None:
        if handle.exited or handle in self._signalled:
            return
        self._signalled.add(handle)
        handle.send_signal(names.STOP_SIGNAL)

    def teardown(self, reason: str, requested: bool, blamed: tuple[int, ...] = ()) -> None:
        """Stop every rank still at work, give every process the grace to exit, kill what is
        left (and whatever any worker started), read the last output, release everything.

        Safe to call more than once and from any exit path.
        """
        self.stop(self.active(), reason, requested, blamed)
        for handle in self.handles:  # ranks that returned may wait for the others to exit
            self._signal(handle)
        self.await_exits([h for h in self.handles if not h.exited], self.stop_grace)
        for handle in self.handles:  # and whatever the workers left running
            handle.kill()
        self.await_exits([h for h in self.handles if not h.exited], DRAIN_LIMIT)
        end = self.clock() + DRAIN_LIMIT
        while any(c for c in self._by_conn if c is not self._by_conn[c].events):
            left = end - self.clock()
            if left <= 0:
                break
            self.pump(left)
        for handle in self.handles:
            handle.process.join(DRAIN_LIMIT)
            handle.exitcode = handle.process.exitcode
            handle.result = None  # run() handed over the results; a failed run keeps none mapped
            handle.close()
        self._by_conn.clear()
        self._flush_output(final=True)  # every line held, now that nothing more can come
        # Workers unlink their shared-memory exchange at once; one that died first cannot.
        shared_files.remove_leftovers(os.getpid())
        logger.debug("teardown: all %d processes gone, pipes closed", len(self.handles))

    def await_exits(self, handles: list[WorkerHandle], limit: float) -> None:
        """Read the workers until every one of ``handles`` exited; after ``limit`` seconds,
        kill those that have not."""
        end = self.clock() + limit
        while any(not h.exited for h in handles):
            left = end - self.clock()
            if left <= 0:
                for handle in handles:
                    if not handle.exited:
                        logger.info("rank %d did not exit within %g s: killed", handle.rank, limit)
                        handle.kill()
                        handle.process.join(DRAIN_LIMIT)
                        handle.exitcode = handle.process.exitcode
                return
            self.pump(min(left, 0.05))


def _nothing(final: bool = False) -> None:
    pass


def _is_stack_dump(line: OutputLine) -> bool:
    """Whether a line is part of a stack the worker dumped (faulthandler's format, stderr)."""
    return line.stream == "stderr" and bool(_DUMP_LINE.match(line.text))


def _reap(process, patience: float = 0.05) -> int | None:
    """The exit code of a process whose sentinel fired, waiting briefly for it to be reapable.

    The sentinel fires when the worker's end of it closes, a moment before the process can be
    collected; waiting here instead of returning to the loop avoids spinning on a ready sentinel.
    Where Linux gives process descriptors, the wait ends the moment the process can be
    collected; elsewhere it looks every half millisecond.
    """
    process.join(0)
    if process.exitcode is not None:
        return process.exitcode
    try:
        exited = os.pidfd_open(process.pid)
    except (AttributeError, OSError, TypeError):
        exited = None
    if exited is not None:
        try:
            select.select([exited], [], [], patience)
        finally:
            os.close(exited)
        process.join(0)
        return process.exitcode
    deadline = time.monotonic() + patience
    while True:
        process.join(0)
        if process.exitcode is not None or time.monotonic() >= deadline:
            return process.exitcode
        time.sleep(0.0005)
