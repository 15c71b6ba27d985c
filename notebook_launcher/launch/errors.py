"""What a failed launch raises, and the records it carries."""

from __future__ import annotations

from ..protocol.failure import WorkerFailure


class LaunchError(RuntimeError):
    """Base class of the errors the launcher raises itself."""


class PreflightError(LaunchError):
    """A check before starting any worker found a problem; the message says how to fix it."""


class WorkersNotStartedError(LaunchError):
    """The OS refused to start a worker process (a process or thread limit reached, no memory
    to fork, no file descriptors left); the workers started before it were stopped.

    ``started`` is how many had started, ``requested`` how many the launch needed and ``reason``
    the OS error.
    """

    def __init__(self, started: int, requested: int, reason: OSError) -> None:
        super().__init__(
            f"the OS refused to start worker process {started + 1} of {requested} ({reason}); "
            f"{started} of {requested} workers had started and were stopped, so none is left "
            "running. The process limit may have been reached (`ulimit -u`, a container's or "
            "cgroup's pids.max): start fewer processes or raise the limit."
        )
        self.started = started
        self.requested = requested
        self.reason = reason


class LaunchBusyError(LaunchError):
    """Another launch is running in this kernel (foreground or background): one at a time."""


class RemoteTraceback(Exception):
    """Carries a worker's formatted traceback as the cause of the exception raised in the kernel."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text.rstrip()


class WorkersFailedError(LaunchError):
    """A worker failed and the others were stopped.

    Raised when the worker's own exception cannot be rebuilt in the kernel (or the process died
    without one). ``failure`` holds the details; ``stopped`` the ranks stopped because of it.
    """

    def __init__(self, failure: WorkerFailure, stopped: tuple[int, ...] = ()) -> None:
        super().__init__(failure.report(stopped))
        self.failure = failure
        self.stopped = stopped


class LaunchTimeoutError(LaunchError, TimeoutError):
    """The run exceeded ``timeout``; ``stacks`` maps each rank to the Python stack it was in."""

    def __init__(self, message: str, stacks: dict[int, str]) -> None:
        parts = [message]
        for rank, stack in sorted(stacks.items()):
            parts += ["", f"Stack of rank {rank}:", stack.rstrip() or "  (no stack received)"]
        super().__init__("\n".join(parts))
        self.stacks = stacks


class WorkerStalledError(LaunchTimeoutError):
    """A rank showed no sign of life for ``stall_timeout`` seconds."""

    def __init__(self, message: str, stacks: dict[int, str], ranks: tuple[int, ...]) -> None:
        super().__init__(message, stacks)
        self.ranks = ranks


class DeadlockError(WorkerStalledError):
    """A rank returned while every other rank waited in a collective that can never complete.

    ``ranks`` are the waiting ranks, ``returned`` the ranks that had returned and ``stacks``
    maps each waiting rank to its Python stack.
    """

    def __init__(
        self,
        message: str,
        stacks: dict[int, str],
        ranks: tuple[int, ...],
        returned: tuple[int, ...],
    ) -> None:
        super().__init__(message, stacks, ranks)
        self.returned = returned


class LaunchStoppedError(LaunchError):
    """The run was stopped on request (``LaunchHandle.stop()`` or a Stop button).

    Every worker has been stopped and nothing of the run is left running.
    """


class NodesMissingError(LaunchError, TimeoutError):
    """A multi-node launch gave up waiting for other nodes to arrive at the rendezvous.

    ``missing_nodes`` lists the node ranks that did not arrive (empty when the rendezvous assigns
    node ranks, as c10d does), ``missing_ranks`` their global ranks, ``endpoint`` the
    ``host:port`` of the rendezvous and ``waited`` the seconds waited.
    """

    def __init__(
        self,
        message: str,
        missing_nodes: tuple[int, ...],
        missing_ranks: tuple[int, ...],
        endpoint: str,
        waited: float,
    ) -> None:
        super().__init__(message)
        self.missing_nodes = missing_nodes
        self.missing_ranks = missing_ranks
        self.endpoint = endpoint
        self.waited = waited


class RemoteNodeFailedError(LaunchError):
    """Another node of a multi-node launch failed or stopped, so this node's ranks were stopped.

    ``node_rank`` is the node that failed (None if it could not say), ``summary`` one line about
    its failure and ``report`` what that node reported (the failed rank, its exception and
    traceback, its last lines), ``stopped`` the global ranks of this node that were stopped.
    """

    def __init__(
        self,
        message: str,
        node_rank: int | None,
        summary: str,
        report: str = "",
        stopped: tuple[int, ...] = (),
    ) -> None:
        super().__init__(message)
        self.node_rank = node_rank
        self.summary = summary
        self.report = report
        self.stopped = stopped


class AttemptFailed(Exception):
    """Internal: one attempt ended in a failure that a restart may cure.

    ``error`` is what the caller sees if no restart is left; ``summary`` one line about it.
    """

    def __init__(self, error: BaseException, summary: str) -> None:
        super().__init__(summary)
        self.error = error
        self.summary = summary


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10 (which has ``__notes__`` but no method)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10
        error.__notes__ = [*getattr(error, "__notes__", []), note]


def failure_to_raise(failure: WorkerFailure, stopped: tuple[int, ...]) -> BaseException:
    """The exception the kernel raises for a failed launch.

    The worker's own exception when it can be rebuilt, so ``except ValueError`` works as it would
    in one process. Its cause is a :class:`RemoteTraceback` holding the whole report (rank, pid,
    exit, stopped ranks, worker traceback, last lines): every frontend shows a cause, while
    exception notes are not shown by IPython before 8.15 (Colab, older kernels). A short note
    repeats the headline, and ``launch_failure`` holds the :class:`WorkerFailure`. Otherwise
    (nothing to rebuild, or SystemExit/KeyboardInterrupt) a :class:`WorkersFailedError`.
    """
    original = failure.original_exception()
    if not isinstance(original, Exception):
        # SystemExit or KeyboardInterrupt rebuilt in the kernel would end the caller's program
        # or pose as an interrupt of the kernel itself, with the launch details lost.
        return WorkersFailedError(failure, stopped)
    error = original
    add_note(error, failure.report(stopped, include_traceback=False, include_lines=False))
    try:
        error.launch_failure = failure  # type: ignore[attr-defined]
    except AttributeError:
        pass
    error.__cause__ = RemoteTraceback(failure.report(stopped))
    return error
