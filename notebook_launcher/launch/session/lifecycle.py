"""A session's workers from start to end: started as a launch starts them (the kernel claimed
for the session until it ends), watched between calls by a thread of their own (a rank that dies
is reported within ``IDLE_CHECK`` seconds even when nothing runs), broken at once when a rank
dies, and let go (bounded) when the session is restarted or closed."""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import wait

from ...protocol import names
from ...protocol import session_messages as protocol
from ...protocol.session_messages import Command
from ..planning import exclusive
from ..planning.entry import checked_plan
from ..processes.signals import interrupts_deferred
from ..rendezvous import open_rendezvous
from ..supervision.group import WorkerGroup
from ..supervision.oom import oom_kills
from ..supervision.runner import output_sink, prepared_launcher, start_workers
from ..supervision.supervisor import OUTSIDE_STOP
from .calls import CallSupervisor
from .errors import RESTART_HINT

CLOSE_WAIT = 10.0  # seconds closed workers get to leave before they are stopped
IDLE_CHECK = 0.5  # seconds between the idle watcher's looks (a death is reported within 1 s)
# The watcher looks only once no call has ended for this long: calls made back to back read
# their own workers' events, and are never woken for them here.
IDLE_QUIET = 0.2


class SessionLifecycle:
    """How a :class:`~notebook_launcher.launch.session.core.Session` starts, watches, breaks and
    ends its workers; mixed into it, on the state its ``__init__`` sets (its plan, lock, state,
    worker group, rendezvous and launcher)."""

    def _start(self) -> None:
        with checked_plan(
            _session_function(),
            (),
            self._plan,
            lambda plan: f"a session of {plan.num_processes} processes",
            "Close it first (session.close() or %distributed close).",
            hand_over=True,  # given back when the session ends (_release)
        ) as plan:
            self._plan = plan
            self._claimed = True
        self._broken = None
        self._calls = 0
        try:
            launcher, payload = prepared_launcher(plan, _session_function(), ())
            self._launcher = launcher
            sink = output_sink(plan)
            # This machine: a store in the kernel; a cluster: rank 0's actor hosts it.
            self._rendezvous = open_rendezvous(plan, sink.notice).attempt(0)
            attempt = self._rendezvous.__enter__()

            def record(handles: list) -> None:
                self._group = WorkerGroup(handles, sink, stop_grace=plan.stop_grace)

            start_workers(launcher, payload, plan, attempt, 0, record, session=True)
            self._state = "alive"
            open_sessions.add(self)
            supervisor = CallSupervisor(self._group, plan, 0, self._oom_baseline)
            self._group.listeners = (supervisor.on_event,)
            supervisor.run_call(time.monotonic() + self.start_timeout)
        except BaseException:
            self._end("the session did not start", graceful=False)
            open_sessions.discard(self)
            raise
        self._idle.set()
        self._starts += 1
        threading.Thread(
            target=_watch_idle,
            args=(weakref.ref(self), self._starts),
            name="notebook_launcher-session",
            daemon=True,
        ).start()

    def _end(self, reason: str, graceful: bool = True) -> None:
        """Let the workers leave (``graceful``: they are told to close and given time to; else
        they are stopped at once), stop the rest, release the store and the kernel."""
        self._idle.clear()
        ending, self._ending = self._ending, None
        if ending is not None:  # a broken session's workers being stopped: let that finish
            ending.join()
        group, self._group = self._group, None
        self._release(group, reason, graceful and self._state == "alive")
        self._state = "closed"

    def _release(self, group: WorkerGroup | None, reason: str, graceful: bool) -> None:
        with interrupts_deferred():
            if group is not None:
                if graceful:
                    _say_close(group)
                    group.await_exits([h for h in group.handles if not h.exited], CLOSE_WAIT)
                group.listeners = ()
                group.teardown(reason, requested=True)
            if self._rendezvous is not None:
                self._rendezvous.__exit__(None, None, None)
                self._rendezvous = None
            if self._claimed:
                self._claimed = False
                exclusive.release()

    def _break(self, why: str) -> None:
        """A rank died or the group could not be formed again: the session is broken at once,
        and its other workers are stopped (with their stop grace) in the background, so the
        error is raised without waiting for them; restart() and close() wait for it."""
        self._idle.clear()
        group, self._group = self._group, None
        self._state, self._broken = "broken", why
        self._ending = threading.Thread(
            target=self._release,
            args=(group, f"the session broke: {why}", False),
            name="notebook_launcher-session-stop",
            daemon=True,
        )
        self._ending.start()

    # -- between calls ----------------------------------------------------------------------

    def _watch(self) -> bool:
        """One look between calls: read what the workers wrote; a dead rank breaks the
        session (said in the cell). Whether to keep watching."""
        if not self._idle.wait(IDLE_CHECK):
            return self._state != "closed"
        quiet = time.monotonic() - self._last_call
        if quiet < IDLE_QUIET:
            time.sleep(IDLE_QUIET - quiet)
            return self._state != "closed"
        group = self._group
        if group is None:
            return False
        try:
            ready = wait(group.waitables(), IDLE_CHECK)
        except (OSError, ValueError):  # pipes closed by a close() meanwhile
            return self._state == "alive"
        self._oom_baseline = oom_kills()
        # A call that started meanwhile reads what arrived: never wait for it here (the next
        # look waits for the session to be idle again).
        if not ready or not self._lock.acquire(blocking=False):
            return True
        try:
            if self._idle.is_set() and self._group is group and self._state == "alive":
                group.pump(0)
                group.sink.flush(final=True)  # between calls nothing waits for other ranks
                dead = [h for h in group.handles if h.exited]
                if dead:
                    handle = dead[0]
                    why = f"rank {handle.rank} died (exit code {handle.exitcode})"
                    # As a call names it: a lost node (node, address, ranks), where known.
                    told = (
                        handle.outside_stop() or OUTSIDE_STOP
                        if handle.stopped_from_outside
                        else handle.death()
                    )
                    if told:
                        why += f": {told}"
                    group.sink.notice(
                        f"notebook_launcher: {why}; the session is broken: {RESTART_HINT}"
                    )
                    self._break(why)
        finally:
            self._lock.release()
        return self._state == "alive"


# The sessions of this kernel not closed yet (alive or broken). Held here so that a session whose
# object the user dropped (``Session(2)`` alone in a cell) is still found by the magics and
# ``Session.current()``, and closed when the kernel exits.
open_sessions: set[SessionLifecycle] = set()


def _watch_idle(ref: weakref.ref, start: int) -> None:
    while True:
        session = ref()
        if session is None or session._starts != start or not session._watch():
            return
        del session


def _say_close(group: WorkerGroup) -> None:
    command = Command(protocol.CLOSE, 0).to_bytes()
    for handle in group.handles:
        try:
            handle.commands.send_bytes(command)
        except OSError:
            pass


def _session_function() -> Callable[[], None]:
    return names.entry_point(names.SESSION_LOOP)


@atexit.register
def _close_all() -> None:
    for session in list(open_sessions):
        try:
            session.close()
        except Exception:  # the interpreter is going: the workers die with it anyway
            pass
