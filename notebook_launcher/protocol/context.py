"""What a worker knows about the job it belongs to, set once by the worker bootstrap.

Library code in a worker (``PartialState`` and friends) reads this typed record instead of
environment variables. Outside a launch :func:`current_context` returns None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..utils.replicas import ReplicaLocal


@dataclass(frozen=True)
class WorkerContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    device: str
    mixed_precision: str
    restart_count: int
    channel: Any = field(default=None, repr=False, compare=False)  # EventChannel to the kernel
    # Whether the kernel can map this machine's shared memory (large results travel there);
    # False for a rank on another machine of a cluster.
    shared_memory: bool = True


_context = ReplicaLocal()  # per thread where XLA replicas are threads


def current_context() -> WorkerContext | None:
    """The running worker's context, or None outside a launched worker."""
    return _context.get()


def set_context(context: WorkerContext | None) -> None:
    _context.set(context)
