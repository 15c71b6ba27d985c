"""What a failed session call raises, worded for a session and short.

A call's error says once what went wrong (the failing rank's own exception, a timeout, a stall,
an interrupt), shows the rank's traceback with notebook cells named as IPython names them, says
what was stopped and which ranks had completed the call, and ends with what the call left of the
session: still usable (every namespace kept, the process group perhaps formed again with its
``DistributedDataParallel`` models moved onto it), or broken, with why and how to start again.
IPython shows exactly that (``_render_traceback_``); elsewhere the exception's notes carry the
same lines and its cause the whole report.
"""

from __future__ import annotations

import dataclasses

from ...protocol.failure import WorkerFailure
from ..errors import (
    RemoteTraceback,
    WorkersFailedError,
    add_note,
    render_traceback,
    without_bootstrap,
)

RESTART_HINT = (
    "%distributed restart (or session.restart()) starts new workers; every rank's state is lost"
)
OUTCOME = "_notebook_launcher_outcome"  # the attribute render_traceback ends a report with


def broken_text(why: str) -> str:
    return f"The session is broken: {why.rstrip('. ')}. {RESTART_HINT}."


def outcome_text(broken: str | None, reformed: bool, rebound: int, unbound: list[str]) -> str:
    """The line that ends a failed call's error: what the call left of the session."""
    if broken is not None:
        return broken_text(broken)
    text = "The session is still usable: every rank kept its namespace"
    if not reformed:
        return text + "."
    text += "; the process group was formed again (a rank was stopped inside a collective)"
    if rebound:
        models = "model" if rebound == 1 else "models"
        text += f" and {rebound} DistributedDataParallel {models} moved onto it"
    if unbound:
        text += f". These models could not be moved and must be wrapped again: {'; '.join(unbound)}"
    return text + "."


def stopped_text(stopped: tuple[int, ...], completed: tuple[int, ...]) -> str:
    parts = []
    if stopped:
        parts.append(f"The call was stopped on rank {_ranks(stopped)}")
    if completed:
        verb = "has" if len(completed) == 1 else "have"
        parts.append(f"rank {_ranks(completed)} {verb} completed it")
    return "; ".join(parts) + "." if parts else ""


def call_failed(
    failure: WorkerFailure, stopped: tuple[int, ...], completed: tuple[int, ...]
) -> BaseException:
    """The exception a session call raises when rank ``failure.rank`` raised: the rank's own
    exception when it can be rebuilt, else a :class:`WorkersFailedError`."""
    original = failure.original_exception()
    error: BaseException
    if isinstance(original, Exception):
        error = original
    else:  # SystemExit/KeyboardInterrupt raised here would end the program or pose as an interrupt
        error = WorkersFailedError(failure, stopped)
    report = _report(failure, stopped, completed)
    kind = (failure.exc_type or "").rsplit(".", 1)[-1] or None
    message = failure.message.strip().split("\n")[0] if failure.exc_type else failure.headline()
    try:
        error.launch_failure = failure  # type: ignore[attr-defined]
        error._render_traceback_ = _Renderer(error, report, message, kind)  # type: ignore[attr-defined]
    except AttributeError:
        pass
    add_note(error, f"{_who(failure)}. {stopped_text(stopped, completed)}".strip())
    error.__cause__ = RemoteTraceback(failure.report(stopped))
    return error


def with_outcome(error: BaseException, outcome: str) -> BaseException:
    """``error`` ending with ``outcome`` (in IPython's rendering and as a note)."""
    try:
        setattr(error, OUTCOME, outcome)
    except AttributeError:
        pass
    add_note(error, outcome)
    return error


class _Renderer:
    """``_render_traceback_`` of a session call's error (IPython calls it)."""

    def __init__(self, error: BaseException | None, report: str, message: str, kind) -> None:
        self.error, self.report, self.message, self.kind = error, report, message, kind

    def __call__(self) -> list[str]:
        return render_traceback(self.error, self.report, self.message, self.kind)

    def __reduce__(self):  # the exception it belongs to pickles without a cycle through it
        return (type(self), (None, self.report, self.message, self.kind))


def _who(failure: WorkerFailure) -> str:
    node = "" if failure.node_rank is None else f"node {failure.node_rank}, "
    if failure.node is not None:  # a rank on a cluster: its node's address and id
        node = f"node {failure.node}, "
    return f"Raised on rank {failure.rank} ({node}pid {failure.pid})"


def _report(failure: WorkerFailure, stopped: tuple[int, ...], completed: tuple[int, ...]) -> str:
    """The rank's traceback (without the line that repeats the message), its last lines, and
    what was stopped."""
    lines = []
    if failure.exc_type is None:  # the process died: its crash report
        lines += [f"{_who(failure)}.", failure.traceback.rstrip()]
    else:
        shown = dataclasses.replace(failure, traceback=without_bootstrap(failure.traceback))
        trace = shown.traceback.rstrip().splitlines()
        short = failure.exc_type.rsplit(".", 1)[-1]
        if trace and trace[-1].strip() in (f"{short}: {failure.message}".strip(), short):
            trace.pop()
        lines += [f"{_who(failure)}:", *trace]
    if failure.last_lines:
        lines += [f"Last lines printed by rank {failure.rank}:"]
        lines += [f"  {line}" for line in failure.last_lines]
    said = stopped_text(stopped, completed)
    if said:
        lines.append(said)
    return "\n".join(lines)


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(str(r) for r in ranks)
