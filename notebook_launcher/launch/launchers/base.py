"""The launcher interface: one class per start method, each starting a whole group of workers."""

from __future__ import annotations

import os
import signal
from abc import ABC
from dataclasses import dataclass, field
from typing import Any

import torch.multiprocessing as tmp

from ...protocol import by_value, results
from ...protocol.channel import LineSplitter
from ...protocol.names import STACK_DUMP_SIGNAL, WORKER_ENTRY, entry_point
from ...protocol.results import Received
from ...protocol.spec import WorkerSpec
from ...protocol.status import RankStatus
from ..errors import WorkersNotStartedError
from ..planning.plan import LaunchPlan
from ..processes import flushing, janitor
from ..processes.process_tree import kill_tree


@dataclass(eq=False)
class WorkerHandle:
    """The kernel's view of one running worker."""

    rank: int
    local_rank: int
    process: Any
    events: Any  # read end of the worker's event pipe
    streams: dict[Any, LineSplitter]  # read end of each output pipe -> its line splitter
    status: RankStatus = RankStatus.STARTING
    pid: int | None = None
    result: Received | None = None  # the rank's return value, once it returned
    failed: Any = None  # the WorkerFailed event, if one arrived
    stopped_from_outside: bool = False  # it failed on a stop signal the launcher had not sent
    exitcode: int | None = None
    last_alive: float = 0.0  # the kernel's monotonic time of its last sign of life
    finished_at: float | None = None  # when the kernel learnt that the function returned
    capture: list[str] | None = field(default=None, repr=False)
    node_rank: int | None = None  # set in multi-node launches, for failure reports
    commands: Any = None  # a session's worker: the write end of its command pipe
    # ... and the call it has taken (shared memory it writes and the kernel reads: no message)
    taken: Any = None
    node: str | None = None  # a rank on another machine: its node, as errors name it
    replies: Any = None  # the write end of the pipe the rank's prompts are answered on
    prompt: Any = None  # the InputRequest the rank waits on an answer to, if any

    @property
    def local_pid(self) -> int | None:
        """The pid of the worker's process on this machine (measured for work); None for a
        rank that runs elsewhere."""
        return self.pid

    def send_signal(self, signum: int) -> None:
        """Deliver ``signum`` to the worker (stop, stack dump, interrupt); a worker that is
        gone is left alone."""
        try:
            os.kill(self.pid, signum)
        except (OSError, TypeError):
            pass

    def answer(self, reply: Any) -> bool:
        """Send the rank the answer to its prompt; False if it cannot be reached."""
        try:
            self.replies.send(reply)
        except (OSError, AttributeError):
            return False
        return True

    def kill(self) -> None:
        """Kill the worker and everything it started (its process group alone once the worker
        was collected: its pid may belong to another process by now)."""
        kill_tree(self.pid, descendants=not self.exited)

    def receive(self, payload: bytes) -> Received:
        """The rank's return value from its ``WorkerFinished`` payload (mapped at once)."""
        return results.receive(payload)

    def death(self) -> str | None:
        """Why the process ended without a word, where the launcher knows more than its exit
        code (a lost node); None otherwise."""
        return None

    def ending(self) -> bool:
        """Whether the worker is going (its connections closed) and its exit is not known yet:
        never here, where the process's end is seen at once."""
        return False

    def ended_as(self) -> str | None:
        """How the process ended where its exit status would mislead (the launcher killed it
        after it went silent); None otherwise."""
        return None

    def outside_stop(self) -> str | None:
        """Why the rank got a stop signal the launcher did not send, where the launcher can tell
        (its node was shutting down); None otherwise."""
        return None

    @property
    def exited(self) -> bool:
        return self.exitcode is not None

    @property
    def closed(self) -> bool:
        return self.events.closed

    def close(self) -> None:
        extra = [c for c in (self.commands, self.replies) if c is not None]
        for conn in [self.events, *self.streams, *extra]:
            try:
                conn.close()
            except OSError:
                pass

    def discard(self) -> None:
        """Kill the worker and everything it started, and release its pipes."""
        self.kill()
        self.process.join(1.0)
        self.close()


class Launcher(ABC):
    """Starts the worker processes of a launch with one start method.

    Attributes:
        start_method: the name ``notebook_launcher(start_method=...)`` and the plan use.
        selectable: whether users choose it with ``start_method=`` (XLA's is chosen by the
            device instead).
        ships_by_value: whether the function and its arguments travel pickled (so they are
            checked for picklability first) rather than inherited.
        pickle_advice: why they must pickle and what to do when they do not.
        runs_sessions: whether a :class:`~notebook_launcher.Session` can start its workers
            with it.
    """

    start_method: str
    selectable: bool = True
    ships_by_value: bool = False
    pickle_advice: str = ""
    runs_sessions: bool = True  # whether a Session's workers can be started with it
    listeners: tuple = ()  # told what the launch's cluster job does (a ClusterJob each time)
    job_status: Any = None  # the last ClusterJob of a launch on a cluster's job, if any
    stop_requested: Any = None  # a threading.Event set to stop the launch (a background one)

    def __init__(self) -> None:
        self.context = tmp.get_context(self.start_method)

    @classmethod
    def for_plan(cls, plan: LaunchPlan) -> Launcher:
        """The launcher that starts ``plan``'s workers."""
        return cls()

    @classmethod
    def check_group(cls, num_processes: int, num_nodes: int, devices: int) -> None:
        """Refuse (ValueError) a group this start method cannot start: ``num_processes`` per
        node on ``num_nodes`` nodes, with ``devices`` devices on this one."""

    def payload(self, function: Any, args: tuple) -> Any:
        """What carries the user's function and arguments into the worker."""
        if self.ships_by_value:
            # By value, so functions, lambdas and classes defined in notebook cells need no
            # importable module. Picklability was checked (and explained) by the preflight.
            return by_value.dumps((function, args))
        return (function, args)  # inherited, never pickled

    def prepare(self) -> None:
        """Work done once in the kernel before the first worker starts."""

    def start_group(self, specs: list[WorkerSpec], payload: Any, now: float) -> list[WorkerHandle]:
        """Start a worker for each spec (in local-rank order) and return their handles.

        If one cannot start, the ones already started are killed before the error is raised;
        when the OS refuses (a process limit reached, no memory for the fork, no descriptors),
        a :class:`WorkersNotStartedError` says how many had started.
        """
        handles: list[WorkerHandle] = []
        # A stack request (STACK_DUMP_SIGNAL) that reached a new worker before its bootstrap
        # registered the handler would kill it: workers start with the signal blocked, and the
        # bootstrap unblocks it once the handler is in place.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {STACK_DUMP_SIGNAL})
        try:
            with flushing.unflushed_forks():
                for spec in specs:
                    handles.append(self.start(spec, payload, now))
        except OSError as error:
            for handle in handles:
                handle.discard()
            raise WorkersNotStartedError(len(handles), len(specs), error) from error
        except BaseException:
            for handle in handles:
                handle.discard()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        # Their files go with this kernel, should it be killed; told once for the whole group.
        janitor.watch(*(handle.pid for handle in handles))
        return handles

    def start(self, spec: WorkerSpec, payload: Any, now: float) -> WorkerHandle:
        """Start one worker process running the worker bootstrap."""
        ctx = self.context
        events_r, events_w = ctx.Pipe(duplex=False)
        out_r, out_w = ctx.Pipe(duplex=False)
        err_r, err_w = ctx.Pipe(duplex=False)
        rank = spec.context.rank
        commands_r, commands_w = ctx.Pipe(duplex=False) if spec.session else (None, None)
        taken = ctx.RawValue("q", 0) if spec.session else None
        replies_r, replies_w = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=entry_point(WORKER_ENTRY),
            args=(spec, payload, events_w, out_w, err_w, commands_r, taken, replies_r),
            name=f"notebook_launcher-rank{rank}",
            daemon=False,  # daemonic processes may not start DataLoader workers
        )
        try:
            process.start()
        except BaseException:
            for conn in (events_r, out_r, err_r, commands_w, replies_w):
                if conn is not None:
                    conn.close()
            raise
        finally:
            # The kernel keeps only read ends (and the command pipe's write end), so EOF arrives
            # once the worker's side is gone, and workers started later do not inherit this
            # worker's ends.
            for conn in (events_w, out_w, err_w, commands_r, replies_r):
                if conn is not None:
                    conn.close()
        return WorkerHandle(
            rank=rank,
            local_rank=spec.context.local_rank,
            process=process,
            events=events_r,
            streams={out_r: LineSplitter(rank, "stdout"), err_r: LineSplitter(rank, "stderr")},
            pid=process.pid,
            last_alive=now,
            node_rank=spec.context.node_rank if spec.context.num_nodes > 1 else None,
            commands=commands_w,
            taken=taken,
            replies=replies_w,
        )
