"""Sessions: a distributed job that stays alive across notebook cells.

A :class:`Session` starts its workers as a launch does (same settings, launchers, rendezvous,
labelled output and worker group), but the function they run is a loop
(:mod:`notebook_launcher.worker.session_loop`) that forms the process group once and then runs
each call the kernel sends. Each call is supervised by a :class:`.calls.CallSupervisor`
with the launch's watchdogs, and gets its own panel (:mod:`.running`). Between calls a thread
watches the workers, so a rank that dies is reported within ``IDLE_CHECK`` seconds even when
nothing runs (:mod:`.lifecycle`).
"""

from __future__ import annotations

import keyword
import threading
from collections.abc import Callable
from typing import Any

from ...protocol import session_messages as protocol
from ...utils.cells import code_name
from ...utils.validation import check_int_in, check_number, invalid
from ..errors import DeadlockError, add_note, shown_as_argument_errors
from ..launchers import LAUNCHERS
from ..planning.planner import plan_launch
from ..planning.settings import DEFAULTS as D
from ..planning.settings import LaunchSettings
from ..result import LaunchResult
from ..supervision.group import WorkerGroup
from ..supervision.oom import oom_kills
from .lifecycle import SessionLifecycle, open_sessions
from .running import SessionCalls

START_TIMEOUT = 300.0  # default seconds for the workers to start and form the group


class Session(SessionLifecycle, SessionCalls):
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
        for session in list(open_sessions):
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
            open_sessions.discard(self)

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


def _check_name(name: object) -> None:
    """A name that push binds and pull reads: a Python identifier that is not a keyword."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"name must be a Python identifier (not a keyword), got {name!r}; the ranks bind "
            "and read names as cells do"
        )


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


__all__ = ["Session"]
