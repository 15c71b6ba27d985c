"""What the kernel hands to the processes it starts: one worker's spec, or an XLA replica group."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .context import WorkerContext


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs, sent from the kernel (picklable for spawn)."""

    context: WorkerContext
    parent_pid: int
    threads: int
    rdzv_id: str
    max_restarts: int
    start_method: str = "fork"  # how the process was started ("fork" or "spawn")
    session: bool = False  # a session's worker: it waits for commands after joining the job
    post_mortem: bool = False  # a failure opens the debugger on the rank before it is reported


@dataclass
class ReplicaPipes:
    """The child ends of one rank's pipes (inherited by fork, never pickled)."""

    events: Any
    stdout: Any
    stderr: Any
    exited: Any  # written by the helper: the exit code of the replica's process
    # fds 1 and 2 of a process of thread replicas whose first replica has this rank (C-level
    # output cannot be told apart by thread); closed unused everywhere else
    process_stdout: Any
    process_stderr: Any

    def connections(self) -> list[Any]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]


@dataclass
class ReplicaGroup:
    """Everything the xmp.spawn helper and its replicas need, for every rank of the launch."""

    kernel_pid: int
    specs: list[WorkerSpec]
    pipes: list[ReplicaPipes]
    hello_r: Any  # replicas announce (pid, rank) here; the helper reads it
    hello_w: Any
    helper_pid: int = 0
    reported: set[int] = field(default_factory=set)  # ranks whose exit the helper reported
    ranks_of: dict[int, list[int]] = field(default_factory=dict)  # replica pid -> its ranks
