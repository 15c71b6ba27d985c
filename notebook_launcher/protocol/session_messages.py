"""What the kernel sends the workers of a session, and how a rank says it is ready for more.

A session's workers join the job once and then wait for commands on a pipe of their own, one at
a time: run a function, run source code in the rank's namespace, bind or read names there,
re-form the process group, close. A push is all or nothing: each rank first receives the values
(which may be interrupted), and binds them only when the kernel, having heard from every rank
that it holds them, sends the commit. A rank answers each command with the events a launch uses
(``WorkerFinished`` with the value, or ``WorkerFailed``) followed by :class:`RankIdle`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

RUN = "run"  # body: cloudpickled (function, args, kwargs)
EXEC = "exec"  # body: cloudpickled (source, filename)
PUSH = "push"  # body: cloudpickled {name: value}, held back until COMMIT
COMMIT = "commit"  # bind what the last PUSH brought (sent once every rank has it); no answer
PULL = "pull"  # body: cloudpickled name
REFORM = "reform"  # re-form the process group (body: nothing); answered by RankIdle(reformed)
CLOSE = "close"  # leave the loop; the process then exits as after a launch
# body: cloudpickled rank: that rank opens the debugger where its last call failed, the others
# return at once
DEBUG = "debug"
KINDS = (RUN, EXEC, PUSH, COMMIT, PULL, REFORM, CLOSE, DEBUG)


class CellInterrupted(KeyboardInterrupt):
    """Raised in a rank's main thread when the call it runs is interrupted (the kernel's cell was
    interrupted, or another rank failed while this one still ran)."""

    def __init__(self, message: str = "the cell was interrupted") -> None:
        super().__init__(message)

    @classmethod
    def type_name(cls) -> str:
        """The qualified name a failure event carries for it."""
        return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class Command:
    """One thing for every rank to do; ``call`` numbers the session's calls from 1."""

    kind: str
    call: int
    body: bytes = b""

    def to_bytes(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def from_bytes(data: bytes) -> Command:
        command = pickle.loads(data)
        if not isinstance(command, Command) or command.kind not in KINDS:
            raise ValueError(f"not a session command: {command!r}")
        return command


@dataclass(frozen=True)
class RankBusy:
    """A rank has taken call ``call`` and is about to run it: from now on the kernel may
    interrupt it (SIGINT), and an interrupt before this rank reads the call is never lost."""

    rank: int
    call: int


@dataclass(frozen=True)
class RankIdle:
    """A rank finished call ``call`` (0: it joined the job) and waits for the next command.

    ``position`` is where the rank stands in the job's sequence of collectives (see
    ``Backend.collectives_position``): equal on every rank when no collective was left half done,
    so the process group can be kept after a failed call. ``reformed`` says the rank has just
    re-formed the process group; ``problem`` why it could not (the session is then broken);
    ``rebound`` how many ``DistributedDataParallel`` models it moved onto the new group and
    ``unbound`` those it could not (each as "Model: why"; they must be wrapped again).
    """

    rank: int
    call: int
    position: tuple[int, ...] = ()
    reformed: bool = False
    problem: str | None = None
    rebound: int = 0
    unbound: tuple[str, ...] = ()


def session_store_prefix(generation: int) -> str:
    """The store keys of the process group a session formed for the ``generation``-th time."""
    return f"notebook_launcher/session/{generation}/"
