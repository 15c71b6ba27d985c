"""The launcher interface: one class per start method, each starting worker processes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch.multiprocessing as tmp

from ..protocol.channel import LineSplitter
from ..protocol.names import WORKER_ENTRY, entry_point
from ..protocol.spec import WorkerSpec


@dataclass(eq=False)
class WorkerHandle:
    """The kernel's view of one running worker."""

    rank: int
    local_rank: int
    process: Any
    events: Any  # read end of the worker's event pipe
    streams: dict[Any, LineSplitter]  # read end of each output pipe -> its line splitter
    status: str = "starting"  # starting, running, finished, failed, stopped
    pid: int | None = None
    result: bytes | None = None
    failed: Any = None  # the WorkerFailed event, if one arrived
    exitcode: int | None = None
    started_at: float = 0.0
    last_alive: float = 0.0
    cpu_seen: float = 0.0
    capture: list[str] | None = field(default=None, repr=False)
    node_rank: int | None = None  # set in multi-node launches, for failure reports

    @property
    def exited(self) -> bool:
        return self.exitcode is not None

    @property
    def closed(self) -> bool:
        return self.events.closed

    def close(self) -> None:
        for conn in [self.events, *self.streams]:
            try:
                conn.close()
            except OSError:
                pass


class Launcher(ABC):
    """Starts worker processes with one multiprocessing start method."""

    start_method: str

    def __init__(self) -> None:
        self.context = tmp.get_context(self.start_method)

    @abstractmethod
    def payload(self, function: Any, args: tuple) -> Any:
        """What carries the user's function and arguments into the worker."""

    def prepare(self) -> None:
        """Work done once in the kernel before the first worker starts."""

    def start(self, spec: WorkerSpec, payload: Any, now: float) -> WorkerHandle:
        ctx = self.context
        events_r, events_w = ctx.Pipe(duplex=False)
        out_r, out_w = ctx.Pipe(duplex=False)
        err_r, err_w = ctx.Pipe(duplex=False)
        rank = spec.context.rank
        process = ctx.Process(
            target=entry_point(WORKER_ENTRY),
            args=(spec, payload, events_w, out_w, err_w),
            name=f"notebook_launcher-rank{rank}",
            daemon=False,  # daemonic processes may not start DataLoader workers
        )
        try:
            process.start()
        except BaseException:
            for conn in (events_r, out_r, err_r):
                conn.close()
            raise
        finally:
            # The kernel keeps only read ends, so EOF arrives once the worker's side is gone,
            # and workers started later do not inherit this worker's write ends.
            for conn in (events_w, out_w, err_w):
                conn.close()
        return WorkerHandle(
            rank=rank,
            local_rank=spec.context.local_rank,
            process=process,
            events=events_r,
            streams={out_r: LineSplitter(rank, "stdout"), err_r: LineSplitter(rank, "stderr")},
            pid=process.pid,
            started_at=now,
            last_alive=now,
            node_rank=spec.context.node_rank if spec.context.num_nodes > 1 else None,
        )
