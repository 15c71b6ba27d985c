"""The record of a failed rank, as the kernel reports it and as a torchrun worker prints it."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from . import results
from .events import WorkerFailed

SECONDARY_MARKS = ("connection closed by peer", "connection reset", "broken pipe")


def exit_description(exitcode: int | None) -> str:
    """'exit code 3', 'signal SIGKILL' or 'no exit code' for a process exit status."""
    if exitcode is None:
        return "no exit code (still running when stopped)"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def looks_secondary(exc_type: str, message: str) -> bool:
    """Whether an exception looks like the consequence of a peer going away (a collective whose
    other side died) rather than a failure of its own."""
    if "DistBackendError" in exc_type or "DistNetworkError" in exc_type:
        return True
    text = message.lower()
    return any(mark in text for mark in SECONDARY_MARKS)


@dataclass(frozen=True)
class WorkerFailure:
    """Everything known about the rank whose failure ended a launch."""

    rank: int
    local_rank: int
    pid: int | None
    exitcode: int | None
    exc_type: str | None  # qualified name of the original exception, None if the process died
    message: str
    traceback: str
    last_lines: tuple[str, ...] = ()
    payload: bytes | None = field(default=None, repr=False)
    node_rank: int | None = None  # set in multi-node launches
    call: int | None = None  # a session's call that raised (its process lives on)
    node: str | None = None  # a rank on a cluster: the node it ran on ("ip, node id")
    # How the process ended where its exit status would mislead (e.g. "killed after it went
    # silent": the launcher's SIGKILL, not the cause).
    ended: str | None = None

    @classmethod
    def from_event(
        cls,
        event: WorkerFailed,
        *,
        local_rank: int,
        pid: int | None,
        exitcode: int | None,
        last_lines: tuple[str, ...] = (),
        node_rank: int | None = None,
        node: str | None = None,
    ) -> WorkerFailure:
        """The failure a worker reported, with what the reader knows about its process."""
        return cls(
            rank=event.rank,
            local_rank=local_rank,
            pid=pid,
            exitcode=exitcode,
            exc_type=event.exc_type,
            message=event.message,
            traceback=event.traceback,
            last_lines=last_lines,
            payload=event.payload,
            node_rank=node_rank,
            node=node,
        )

    @property
    def exit(self) -> str:
        return self.ended or exit_description(self.exitcode)

    def headline(self) -> str:
        node = "" if self.node_rank is None else f"node {self.node_rank}, "
        if self.node is not None:
            node = f"{self.node}, "
        where = f"rank {self.rank} ({node}local rank {self.local_rank}, pid {self.pid})"
        if self.exc_type is None:
            if self.ended is not None:
                return f"{where} was {self.ended}: {self.message}"
            return f"{where} died with {self.exit}: {self.message}"
        short = self.exc_type.rsplit(".", 1)[-1]
        if self.call is not None:
            return f"{where} raised in call {self.call} of the session: {short}: {self.message}"
        return f"{where} failed with {self.exit}: {short}: {self.message}"

    def report(
        self, stopped: tuple[int, ...], include_traceback: bool = True, include_lines: bool = True
    ) -> str:
        lines = [self.headline()]
        if stopped:
            ranks = ", ".join(str(r) for r in stopped)
            lines.append(f"Stopped because of this failure: rank {ranks}.")
        body = self.traceback.rstrip() if include_traceback and self.traceback else ""
        if body.strip() and body.strip() != "Traceback (most recent call last):":
            title = "Traceback" if self.exc_type is not None else "Crash report"
            lines += ["", f"{title} of rank {self.rank}:", body]
        if include_lines and self.last_lines:
            lines += ["", f"Last lines printed by rank {self.rank}:"]
            lines += [f"  {line}" for line in self.last_lines]
        return "\n".join(lines)

    def original_exception(self) -> BaseException | None:
        """The worker's exception, rebuilt in the kernel, or None if it did not survive pickling."""
        if self.payload is None:
            return None
        try:
            exc = results.receive(self.payload).load()
        except Exception:
            return None
        return exc if isinstance(exc, BaseException) else None
