"""How a session runs one call: what it sends pickled once for every rank (its large pieces in
shared memory on this machine), the command sent to every rank or none, the call supervised by a
:class:`~.calls.CallSupervisor` with its own panel, and every rank's value returned."""

from __future__ import annotations

import os
import time
from typing import Any

from ...protocol import results, shared_files
from ...protocol import session_messages as protocol
from ...protocol.session_messages import Command
from ...ui import RunPanel, create_view
from ..errors import (
    SessionBrokenError,
    SessionClosedError,
    add_note,
    interrupt_error,
    shown_as_argument_errors,
)
from ..planning.preflight import find_unpicklable
from ..processes.signals import interrupts_deferred
from ..result import LaunchResult
from ..supervision.group import WorkerGroup
from ..supervision.postmortem import debugged_on_rank, shell_wants_pdb
from .calls import CallSupervisor, interrupted_text, with_session_notes
from .errors import broken_text

NOTHING_PUSHED = "Nothing was pushed: no rank's namespace changed."


class SessionCalls:
    """How a :class:`~notebook_launcher.launch.session.core.Session` runs each call; mixed into
    it, on the state its ``__init__`` sets and its lifecycle (``_break``) and ``debug``."""

    def _usable(self) -> WorkerGroup:
        if self._state == "broken":
            raise SessionBrokenError(broken_text(self._broken or "unknown"))
        if self._state != "alive" or self._group is None:
            raise SessionClosedError(
                "the session is closed; %distributed restart (or session.restart(), or a new "
                "Session) starts workers"
            )
        return self._group

    def _call(
        self, kind: str, value: Any, parts: dict[str, Any], timeout: float | None
    ) -> LaunchResult:
        """Send ``value`` (its pieces named by ``parts``, for errors) to every rank as call
        ``kind``, supervise the call, return every rank's value."""
        with self._lock:
            self._usable()
            try:
                with shown_as_argument_errors():
                    # Ranks on other machines (a cluster) cannot map this one's shared memory.
                    body = _pickled(value, parts, shared=self._plan.cluster is None)
            except KeyboardInterrupt:  # while a large value was being written: nothing sent
                raise interrupt_error(_not_sent(kind)) from None
            try:
                return self._call_with(kind, body.data, timeout)
            except Exception as error:
                shell = shell_wants_pdb()
                if shell is not None and kind in (protocol.RUN, protocol.EXEC):
                    if self.failed_rank is not None and self._state == "alive":
                        debugged_on_rank(shell, error)
                        self.debug(self.failed_rank)  # %pdb on: the rank's frames, at once
                raise
            finally:
                body.release()

    def _call_with(self, kind: str, body: bytes, timeout: float | None) -> LaunchResult:
        with self._lock:
            group = self._usable()
            self._idle.clear()
            view = None
            try:
                self._calls += 1
                if kind in (protocol.RUN, protocol.EXEC):  # the ranks drop their last failure
                    self.failed_rank = None
                plan = self._plan
                supervisor = CallSupervisor(group, plan, self._calls, self._oom_baseline)
                if self.settings.ui != "none" and kind in (protocol.RUN, protocol.EXEC):
                    view = create_view(self.settings.ui, plan.num_processes, plan.output)
                group.listeners = (supervisor.on_event, *((view,) if view else ()))
                _show_job(self._launcher.job_status, view, group.sink)
                started = time.monotonic()
                deadline = None if timeout is None else started + timeout
                group.begin_call(started)
                command = Command(kind, self._calls, body).to_bytes()
                sent = committed = False
                try:
                    with interrupts_deferred():  # the command reaches every rank or none
                        _send_all(group, command)
                        sent = True
                    payloads = supervisor.run_call(deadline)
                    if kind == protocol.PUSH:  # every rank holds the values: bind them
                        with interrupts_deferred():
                            _send_all(group, Command(protocol.COMMIT, self._calls).to_bytes())
                            committed = True
                except KeyboardInterrupt:
                    if not sent:
                        raise interrupt_error(_not_sent(kind)) from None
                    if committed:
                        raise interrupt_error(
                            "the cell was interrupted after the push took effect on every rank; "
                            "the session is still usable."
                        ) from None
                    with interrupts_deferred():
                        supervisor.settle("interrupted", (), requested=True)
                        self._settled(supervisor)
                    text = interrupted_text(supervisor)
                    if kind == protocol.PUSH:
                        text += f" {NOTHING_PUSHED}"
                    raise interrupt_error(text) from None
                except BrokenPipeError as error:
                    self._break(f"a worker's command pipe closed ({error})")
                    raise SessionBrokenError(f"the session broke: {self._broken}") from None
                except BaseException as error:
                    failure = getattr(error, "launch_failure", None) or getattr(
                        error, "failure", None
                    )
                    if kind != protocol.DEBUG:
                        self.failed_rank = getattr(failure, "rank", None)
                    with interrupts_deferred():
                        self._settled(supervisor)
                    if kind == protocol.PUSH:
                        add_note(error, NOTHING_PUSHED)
                    raise with_session_notes(error, supervisor) from error.__cause__
                values = [p.load() if p is not None else None for p in payloads]
                del payloads
                for handle in group.handles:  # the values are the caller's alone from now
                    handle.result = None
                panel = RunPanel(view.model) if view is not None else None
                group.sink.flush(final=True)
                elapsed = time.monotonic() - started
                return LaunchResult(values, 0, elapsed, panel=panel, outputs=group.sink.outputs())
            finally:
                group.sink.flush(final=True)
                if view is not None:
                    view.finish()
                if self._state == "alive":
                    group.listeners = ()
                    self._last_call = time.monotonic()
                    self._idle.set()

    def _settled(self, supervisor: CallSupervisor) -> None:
        if supervisor.broken is not None:
            self._break(supervisor.broken)


def _show_job(job: Any, view: Any, sink: Any) -> None:
    """Show the session's cluster job (its time left) in the call's panel, and warn in the
    cell when it nears its time limit."""
    if job is None:
        return
    if view is not None:
        view(job)
    warning = job.warning()
    if warning is not None:
        sink.notice(warning)


def _not_sent(kind: str) -> str:
    text = "the cell was interrupted before its call reached any rank; the session is still usable."
    return f"{text} {NOTHING_PUSHED}" if kind == protocol.PUSH else text


def _send_all(group: WorkerGroup, command: bytes) -> None:
    """``command`` to every rank (callers defer interrupts around it, so that it reaches every
    rank or none)."""
    for handle in group.handles:
        handle.commands.send_bytes(command)


PICKLE_ADVICE = (
    "A session sends each call's function and values to its workers by value (cloudpickle): "
    "pass plain data, or build such objects on the workers (with exec or run)."
)


class Body:
    """What a call sends every rank: ``value`` pickled by value once for all of them; with
    ``shared``, its large pieces (tensors, arrays of 1 MB and more) in shared-memory files that
    every rank maps, which :meth:`release` removes once the call has ended. The files are named
    after the kernel, so those of a kernel killed meanwhile are removed by its janitor."""

    def __init__(self, value: Any, shared: bool = True) -> None:
        self.data, self.paths = results.share(value, os.getpid() if shared else None)

    def release(self) -> None:
        for path in self.paths:
            shared_files.remove(path)
        self.paths = ()


def _pickled(value: Any, parts: dict[str, Any], shared: bool = True) -> Body:
    """``value`` pickled for every rank (``shared``: large pieces through shared memory); else a
    TypeError naming the part of it (of ``parts``) that cannot be."""
    try:
        return Body(value, shared)
    except Exception as error:
        for name, part in parts.items():
            problem = find_unpicklable(part, name)
            if problem is not None:
                raise TypeError(f"{problem}. {PICKLE_ADVICE}") from error
        raise TypeError(
            f"what this call sends cannot be pickled ({error}). {PICKLE_ADVICE}"
        ) from error
