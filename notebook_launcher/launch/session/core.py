"""Sessions: a distributed job that stays alive across notebook cells.

A :class:`Session` starts its workers as a launch does (same settings, launchers, rendezvous,
labelled output and worker group), but the function they run is a loop
(:mod:`notebook_launcher.worker.session_loop`) that forms the process group once and then runs
each call the kernel sends. Each call is supervised by a :class:`.calls.CallSupervisor`
with the launch's watchdogs, and gets its own panel. Between calls a thread watches the workers,
so a rank that dies is reported within ``IDLE_CHECK`` seconds even when nothing runs.
"""

from __future__ import annotations

import atexit
import keyword
import os
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from ...protocol import names, results, shared_files
from ...protocol import session_messages as protocol
from ...protocol.session_messages import Command
from ...ui import RunPanel, create_view
from ...utils.cells import code_name
from ...utils.validation import check_int_in, check_number, invalid
from ..errors import (
    DeadlockError,
    SessionBrokenError,
    SessionClosedError,
    add_note,
    interrupt_error,
    shown_as_argument_errors,
)
from ..launchers import LAUNCHERS
from ..planning import exclusive
from ..planning.entry import checked_plan
from ..planning.planner import plan_launch
from ..planning.preflight import find_unpicklable
from ..planning.settings import DEFAULTS as D
from ..planning.settings import LaunchSettings
from ..processes.signals import interrupts_deferred
from ..rendezvous import open_rendezvous
from ..result import LaunchResult
from ..supervision.group import WorkerGroup
from ..supervision.oom import oom_kills
from ..supervision.postmortem import debugged_on_rank, shell_wants_pdb
from ..supervision.runner import output_sink, prepared_launcher, start_workers
from ..supervision.supervisor import OUTSIDE_STOP
from .calls import CallSupervisor, interrupted_text, with_session_notes
from .errors import RESTART_HINT, broken_text

START_TIMEOUT = 300.0  # default seconds for the workers to start and form the group
CLOSE_WAIT = 10.0  # seconds closed workers get to leave before they are stopped
NOTHING_PUSHED = "Nothing was pushed: no rank's namespace changed."
IDLE_CHECK = 0.5  # seconds between the idle watcher's looks (a death is reported within 1 s)
# The watcher looks only once no call has ended for this long: calls made back to back read
# their own workers' events, and are never woken for them here.
IDLE_QUIET = 0.2

# The sessions of this kernel not closed yet (alive or broken). Held here so that a session whose
# object the user dropped (``Session(2)`` alone in a cell) is still found by the magics and
# ``Session.current()``, and closed when the kernel exits.
_open: set[Session] = set()


class Session:
    """A job of ``num_processes`` worker processes that stays alive across notebook cells.

    The workers start at once, form the process group (``PartialState()`` is ready on every
    rank) and then wait for work. Each :meth:`run` or :meth:`exec` runs on every rank with no
    fork, no rendezvous and no imports, and returns a :class:`LaunchResult`; each rank keeps its
    own namespace from call to call (:meth:`exec`, :meth:`push`, :meth:`pull`).

    Every guarantee of a launch holds for each call: output labelled by rank, a live panel in
    the cell (left as a static copy), the first failing rank's exception raised here with its
    own type and rank, the call stopped on the other ranks (a rank waiting for the failed one in
    a collective is released), kernel interrupts, ``stall_notice``, ``stall_timeout`` and
    ``timeout`` (per call). After a failed call the session stays usable, with every rank's
    namespace; the process group is formed again if a rank was stopped inside a collective,
    and the ``DistributedDataParallel`` models built on it are moved onto the new group (the
    same model objects train on). A ``push`` takes effect on every rank or on none.
    A rank whose process dies breaks the session: :meth:`restart` starts new workers (every
    rank's state is lost). One launch or session runs in a kernel at a time.

    Args:
        num_processes: processes to start (as :func:`notebook_launcher`).
        mixed_precision, use_port, start_method, stall_timeout, stall_notice, stop_grace,
            threads_per_process, output, ui, monitor_interval, log_line_prefix_template: as
            :func:`notebook_launcher` (``stall_timeout`` and ``stall_notice`` apply per call).
        timeout: seconds each call may take (None: no limit); ``exec`` takes its own too.
        start_timeout: seconds the workers may take to start and form the group.
        cluster: None (this machine), ``"ray"`` or a :class:`RayCluster`: each rank in a Ray
            actor on the cluster; ``"slurm"`` or a :class:`SlurmCluster`: each rank a task of a
            Slurm job step, the job held until :meth:`close`; as :func:`notebook_launcher` does
            with ``cluster=``.

    Sessions run on one machine (no multi-node settings), on a Ray cluster or on Slurm
    (``cluster=``), and not on TPUs.

    Example:
        >>> with Session(num_processes=2) as session:
        ...     session.exec("import torch; x = torch.ones(1) * PartialState().process_index")
        ...     session.pull("x")
        [tensor([0.]), tensor([1.])]
    """

    def __init__(
        self,
        num_processes: int | None = D.num_processes,
        *,
        mixed_precision: str = D.mixed_precision,
        use_port: str | int = D.use_port,
        start_method: str = D.start_method,
        timeout: float | None = D.timeout,
        stall_timeout: float | None = D.stall_timeout,
        stall_notice: float | None = D.stall_notice,
        stop_grace: float = D.stop_grace,
        threads_per_process: int | None = D.threads_per_process,
        output: str = D.output,
        ui: str = D.ui,
        monitor_interval: float = D.monitor_interval,
        log_line_prefix_template: str | None = D.log_line_prefix_template,
        start_timeout: float = START_TIMEOUT,
        cluster: Any = None,
    ) -> None:
        settings = dict(locals())
        del settings["self"], settings["start_timeout"]
        with shown_as_argument_errors():
            self.settings = LaunchSettings(**settings)
            self.start_timeout = check_number("start_timeout", start_timeout, positive=True)
            plan = plan_launch(self.settings)
            if not LAUNCHERS[plan.start_method].runs_sessions:
                raise invalid(
                    "device",
                    plan.device,
                    "sessions run on CPUs and GPUs; on TPUs use notebook_launcher",
                )
        self._plan = plan
        self._lock = threading.RLock()  # one call (or close) at a time
        self._idle = threading.Event()  # set while no call runs: the watcher may read
        self._state = "closed"
        self._calls = 0
        self._broken: str | None = None
        self._group: WorkerGroup | None = None
        self._rendezvous: Any = None
        self._launcher: Any = None  # what started the workers (it knows their cluster job)
        self._claimed = False
        self._starts = 0  # each start has its own watcher thread, which ends with it
        self._ending: threading.Thread | None = None  # stopping a broken session's workers
        # The out-of-memory kill counters, read between calls (by the idle watcher) rather than
        # on every call: what a rank's SIGKILL is compared with.
        self._oom_baseline = oom_kills()
        self._last_call = 0.0  # the monotonic time the last call ended (see IDLE_QUIET)
        self.failed_rank: int | None = None  # the rank whose failure ended the last call
        self._start()

    # -- what users call --------------------------------------------------------------------

    @property
    def state(self) -> str:
        """ "alive" (calls run), "broken" (a rank died: :meth:`restart`) or "closed"."""
        return self._state

    @property
    def num_processes(self) -> int:
        return self._plan.num_processes

    @property
    def calls(self) -> int:
        """How many calls this session's workers have run."""
        return self._calls

    @classmethod
    def current(cls) -> Session | None:
        """The session open in this kernel (alive or broken), or None."""
        for session in list(_open):
            if session.state != "closed":
                return session
        return None

    def run(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> LaunchResult:
        """Run ``function(*args, **kwargs)`` on every rank; every rank's value, in rank order.

        The function and arguments travel by value (cloudpickle), so functions and classes
        defined in notebook cells work; each call starts no process.
        """
        with shown_as_argument_errors():
            if not callable(function):
                raise TypeError(
                    f"function must be callable (pass the function, do not call it), got "
                    f"{type(function).__name__}: {function!r}"
                )
            parts = {"function": function}
            parts.update({f"args[{i}]": arg for i, arg in enumerate(args)})
            parts.update({f"kwargs[{key!r}]": value for key, value in kwargs.items()})
        return self._call(protocol.RUN, (function, args, kwargs), parts, self.settings.timeout)

    def exec(
        self,
        source: str,
        *,
        timeout: float | None = None,
        filename: str = "",
        ranks: list[int] | tuple[int, ...] | None = None,
    ) -> LaunchResult:
        """Run ``source`` on every rank in that rank's own namespace, as a notebook cell runs.

        Each rank's value is its last line's when that is an expression, else None. Names
        bound stay for later calls (``exec``, :meth:`pull`). ``timeout`` (default: the
        session's) bounds this call; ``filename`` names the code in tracebacks; ``ranks``
        (default: all) runs it on those ranks only (the others' values are None): a collective
        it calls then waits for ranks that do not run it, which is reported as a deadlock.
        """
        with shown_as_argument_errors():
            if not isinstance(source, str):
                raise TypeError(f"source must be a str of Python code, got {type(source).__name__}")
            if not isinstance(filename, str):
                raise TypeError(f"filename must be a str, got {type(filename).__name__}")
            compile(source, filename or "<session>", "exec")  # a syntax error is raised here
            if timeout is not None:
                check_number("timeout", timeout, positive=True)
            chosen = _chosen_ranks(ranks, self.num_processes)
        name = filename or f"<session exec {self._calls + 1}>"
        try:
            return self._exec(source, name, chosen, timeout)
        except DeadlockError as error:
            if chosen is not None:
                left_out = [r for r in range(self.num_processes) if r not in chosen]
                add_note(
                    error,
                    f"rank {', '.join(map(str, left_out))} did not run this cell "
                    f"(ranks={list(chosen)}): a collective waits for every rank of its group",
                )
            raise

    def _exec(
        self, source: str, name: str, chosen: tuple[int, ...] | None, timeout: float | None
    ) -> LaunchResult:
        return self._call(
            protocol.EXEC,
            # the rank's debugger names the cell as IPython does; only ``chosen`` ranks run it
            (source, name, code_name(name), chosen),
            {},
            timeout if timeout is not None else self.settings.timeout,
        )

    def push(self, **values: Any) -> None:
        """Bind each ``name=value`` in every rank's namespace (values travel by value)."""
        with shown_as_argument_errors():
            if not values:
                raise TypeError("push() needs at least one name=value")
            for name in values:
                _check_name(name)
        self._call(protocol.PUSH, values, values, self.settings.timeout)

    def pull(self, name: str) -> list[Any]:
        """Every rank's value of ``name`` in its namespace, in rank order."""
        with shown_as_argument_errors():
            _check_name(name)
        return self._call(protocol.PULL, name, {}, self.settings.timeout).values

    def debug(self, rank: int | None = None) -> None:
        """Open the debugger on ``rank`` (default: the rank whose failure ended the last call)
        in the frame where that call failed, with its locals, as ``%debug`` does for local code.
        The prompt opens in this cell; ``q`` or ``c`` ends it."""
        with shown_as_argument_errors():
            if rank is None:
                rank = self.failed_rank
            if rank is None:
                raise ValueError(
                    "no call of this session has failed on a rank since the last one that ran: "
                    "nothing to debug"
                )
            check_int_in("rank", rank, 0, self.num_processes - 1)
        self._call(protocol.DEBUG, rank, {}, None)

    def restart(self) -> None:
        """Stop the workers and start new ones with the same settings. Every rank's state (its
        namespace, models, data) is lost."""
        with self._lock:
            self._end("session restarted")
            print(
                f"notebook_launcher: restarting the session: {self.num_processes} new "
                "processes; every rank's earlier state is gone",
                flush=True,
            )
            self._start()

    def close(self) -> None:
        """Let the workers leave (bounded), then stop whatever is left; nothing stays behind.
        Safe to call more than once."""
        with self._lock:
            self._end("session closed")
            _open.discard(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        plan = self._plan
        text = (
            f"<Session {self._state}: {plan.num_processes} processes ({plan.device}, "
            f"{plan.start_method}), {self._calls} calls"
        )
        if self._broken:
            text += f"; broken: {self._broken}"
        return text + ">"

    # -- starting and ending ----------------------------------------------------------------

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
            _open.add(self)
            supervisor = CallSupervisor(self._group, plan, 0, self._oom_baseline)
            self._group.listeners = (supervisor.on_event,)
            supervisor.run_call(time.monotonic() + self.start_timeout)
        except BaseException:
            self._end("the session did not start", graceful=False)
            _open.discard(self)
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

    # -- calls ------------------------------------------------------------------------------

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


def _watch_idle(ref: weakref.ref, start: int) -> None:
    while True:
        session = ref()
        if session is None or session._starts != start or not session._watch():
            return
        del session


def _not_sent(kind: str) -> str:
    text = "the cell was interrupted before its call reached any rank; the session is still usable."
    return f"{text} {NOTHING_PUSHED}" if kind == protocol.PUSH else text


def _send_all(group: WorkerGroup, command: bytes) -> None:
    """``command`` to every rank (callers defer interrupts around it, so that it reaches every
    rank or none)."""
    for handle in group.handles:
        handle.commands.send_bytes(command)


def _say_close(group: WorkerGroup) -> None:
    command = Command(protocol.CLOSE, 0).to_bytes()
    for handle in group.handles:
        try:
            handle.commands.send_bytes(command)
        except OSError:
            pass


def _check_name(name: object) -> None:
    """A name that push binds and pull reads: a Python identifier that is not a keyword."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"name must be a Python identifier (not a keyword), got {name!r}; the ranks bind "
            "and read names as cells do"
        )


def _session_function() -> Callable[[], None]:
    return names.entry_point(names.SESSION_LOOP)


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


@atexit.register
def _close_all() -> None:
    for session in list(_open):
        try:
            session.close()
        except Exception:  # the interpreter is going: the workers die with it anyway
            pass


__all__ = ["Session"]


def _chosen_ranks(ranks: Any, num_processes: int) -> tuple[int, ...] | None:
    """``ranks`` checked: distinct ranks of the session, at least one; None: every rank."""
    if ranks is None:
        return None
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, (list, tuple)) or not ranks:
        raise TypeError(f"ranks must be a non-empty list of ranks, got {ranks!r}")
    for rank in ranks:
        check_int_in("ranks", rank, 0, num_processes - 1)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks={list(ranks)!r} names a rank twice")
    return tuple(ranks)
