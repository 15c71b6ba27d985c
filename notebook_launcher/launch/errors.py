"""What a failed launch raises, and the records it carries."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterator

from ..protocol.failure import WorkerFailure
from ..protocol.prompts import DebuggerQuit, StdinUnavailableError  # noqa: F401 - public errors
from ..utils.cells import code_name


class LaunchError(RuntimeError):
    """Base class of the errors the launcher raises itself.

    In IPython (Jupyter, Colab, the IPython shell) it is shown as its report alone, without the
    launcher's own frames; elsewhere as a normal traceback.
    """

    def _render_traceback_(self) -> list[str]:
        return render_traceback(self, str(self))


class ClusterError(LaunchError):
    """The cluster cannot run the launch: it cannot hold every rank, or a rank's actor could
    not start (the message says what was asked, what the cluster has, and what to do)."""


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


class SessionBrokenError(LaunchError):
    """A session cannot run calls any more: a rank died, or its process group could not be
    formed again. ``session.restart()`` starts new workers (every rank's state is lost)."""


class SessionClosedError(LaunchError):
    """The session was closed; make a new one (or ``session.restart()``)."""


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

    def _render_traceback_(self) -> list[str]:
        return render_traceback(self, _short_report(self.failure, self.stopped))


class LaunchTimeoutError(LaunchError, TimeoutError):
    """The run exceeded ``timeout``; ``stacks`` maps each rank to the Python stack it was in."""

    def __init__(self, message: str, stacks: dict[int, str]) -> None:
        super().__init__(_with_stacks(message, stacks))
        self.stacks = stacks
        self._message = message

    def _render_traceback_(self) -> list[str]:
        # The frames of the worker's bootstrap, at the bottom of each stack, are left out.
        stacks = {rank: _without_bootstrap_frames(stack) for rank, stack in self.stacks.items()}
        return render_traceback(self, _with_stacks(getattr(self, "_message", ""), stacks))


def _with_stacks(message: str, stacks: dict[int, str]) -> str:
    parts = [message]
    for rank, stack in sorted(stacks.items()):
        parts += ["", f"Stack of rank {rank}:", stack.rstrip() or "  (no stack received)"]
    return "\n".join(parts)


class WorkerStalledError(LaunchTimeoutError):
    """No rank made progress for ``stall_timeout`` seconds; ``ranks`` are where the job was
    stuck (the ranks the others waited for)."""

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
        if not hasattr(type(error), "_render_traceback_"):  # IPython shows the report alone
            error._render_traceback_ = _FailureRenderer(error, failure, stopped)  # type: ignore[attr-defined]
    except AttributeError:
        pass
    error.__cause__ = RemoteTraceback(failure.report(stopped))
    return error


# -- how IPython shows these errors -----------------------------------------------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_TRACEBACK_START = "Traceback (most recent call last):"
_RED, _PLAIN = "\x1b[31m", "\x1b[39m"


class _FailureRenderer:
    """``_render_traceback_`` of a worker's exception rebuilt in the kernel (IPython calls it)."""

    def __init__(
        self, error: BaseException | None, failure: WorkerFailure, stopped: tuple[int, ...]
    ) -> None:
        self.error = error
        self.failure = failure
        self.stopped = stopped

    def __call__(self) -> list[str]:
        message = str(self.error) if self.error is not None else self.failure.message
        report = _short_report(self.failure, self.stopped)
        kind = (self.failure.exc_type or "").rsplit(".", 1)[-1] or None
        return render_traceback(self.error, report, message.strip().split("\n")[0], kind)

    def __reduce__(self):  # the exception it belongs to pickles without a cycle through it
        return (type(self), (None, self.failure, self.stopped))


def _short_report(failure: WorkerFailure, stopped: tuple[int, ...]) -> str:
    shown = dataclasses.replace(failure, traceback=without_bootstrap(failure.traceback))
    return shown.report(stopped)


def render_traceback(
    error: BaseException | None, report: str, message: str | None = None, kind: str | None = None
) -> list[str]:
    """The lines IPython shows for a launch error: its type and report, then the caller's frames.

    ``message`` follows the type on the first line (default: the report's first line, which is
    then not repeated). The launcher's own frames (in the kernel and the worker's bootstrap) are
    left out, and code of notebook cells is named as IPython names it ("Cell In[3], line 5").
    """
    try:
        lines = _name_cells(report.strip("\n")).splitlines() or [""]
        if message is None:
            message, lines = lines[0], lines[1:]
        kind = type(error).__name__ if error is not None else kind or "Error"
        title = f"{kind}: {message}" if message else kind
        if _coloured():
            title = f"{_RED}{title}{_PLAIN}"
        shown = [title, *lines]
        outcome = getattr(error, "_notebook_launcher_outcome", None)  # a session call's
        if outcome:
            if shown[-1].startswith(" "):  # after a stack, a blank line first
                shown.append("")
            shown.append(outcome)
        callers = _caller_frames(error)
        if callers:
            where = "the session was called" if outcome else "the launch was called"
            shown += ["", f"Raised where {where}:", *callers]
        return shown
    except Exception:  # never hide the error behind a failure to show it
        return traceback.format_exception(type(error), error, getattr(error, "__traceback__", None))


def _coloured() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return str(getattr(shell, "colors", "nocolor")).lower() != "nocolor"


def _cell_name(path: str) -> str | None:
    """ "Cell In[3]" for the code file of a notebook cell, else None."""
    name = code_name(path)
    return name if name != path else None


def _name_cells(text: str) -> str:
    def named(match: re.Match) -> str:
        cell = _cell_name(match["file"])
        return f"{cell}, line {match['line']}" if cell else match[0]

    return _FRAME.sub(named, text)


def _internal(path: str) -> bool:
    """Frames of the launcher, IPython or the standard library: nothing the user wrote."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    ipython = sys.modules.get("IPython")
    roots = [package, sysconfig.get_paths()["stdlib"] + os.sep]
    if ipython is not None and getattr(ipython, "__file__", None):
        roots.append(os.path.dirname(os.path.abspath(ipython.__file__)) + os.sep)
    return os.path.abspath(path).startswith(tuple(roots))


def _caller_frames(error: BaseException | None) -> list[str]:
    tb = getattr(error, "__traceback__", None)
    lines = []
    for frame in traceback.extract_tb(tb) if tb is not None else ():
        if _internal(frame.filename) or _generated(frame):
            continue
        where = _cell_name(frame.filename) or f'File "{frame.filename}"'
        lines.append(f"  {where}, line {frame.lineno}, in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    return lines


def _generated(frame: traceback.FrameSummary) -> bool:
    """Code nobody wrote by hand: IPython's rewriting of a magic (the whole cell again, as one
    string) and the generated methods of dataclasses (``File "<string>"``)."""
    line = (frame.line or "").lstrip()
    return frame.filename.startswith("<string>") or line.startswith(
        ("get_ipython().run_cell_magic(", "get_ipython().run_line_magic(")
    )


def _without_bootstrap_frames(stack: str) -> str:
    """A stack dump (most recent call first) without the bootstrap's frames at its bottom."""
    lines = stack.rstrip().splitlines()
    while lines and (frame := _FRAME.search(lines[-1])) and _internal(frame["file"]):
        lines.pop()
    return "\n".join(lines)


def without_bootstrap(text: str) -> str:
    """A worker's traceback without its leading frames of the launcher's bootstrap."""
    kept: list[str] = []
    leading = skipping = False
    for line in text.splitlines():
        frame = _FRAME.search(line) if line.startswith("  File ") else None
        if line.startswith(_TRACEBACK_START):
            leading, skipping = True, False
        elif frame is not None:
            skipping = leading = leading and _internal(frame["file"])
            if skipping:
                continue
        elif skipping and line.startswith("    "):
            continue
        else:
            leading = skipping = False
        kept.append(line)
    if not any(line.startswith("  File ") for line in kept):
        return text  # it failed in the bootstrap itself: keep every frame
    if kept and kept[0].startswith(_TRACEBACK_START):  # the report says whose traceback it is
        kept = kept[1:]
    return "\n".join(kept)


def interrupt_error(text: str) -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` a stopped launch or session call raises: IPython shows it as
    a failure is shown, its text and the caller's frames only (no launcher frames, no cell
    source repeated); ``except KeyboardInterrupt`` catches it as ever."""
    error = KeyboardInterrupt(text)
    error._render_traceback_ = functools.partial(render_traceback, error, text)  # type: ignore[attr-defined]
    return error


@contextlib.contextmanager
def shown_as_argument_errors() -> Iterator[None]:
    """Around the checks before a launch: a ``TypeError``/``ValueError`` raised inside (a bad
    setting, an argument that cannot travel) is shown by IPython as its message and the caller's
    frames only, as a failed rank is, not through the launcher's own frames. Its type and text
    are untouched, so ``except ValueError`` works as before."""
    try:
        yield
    except (TypeError, ValueError) as error:
        try:
            error._render_traceback_ = functools.partial(render_traceback, error, str(error))
        except AttributeError:  # an exception type that takes no attributes
            pass
        raise
