"""The collectives the data loaders need, on top of :mod:`notebook_launcher.ops`."""

from __future__ import annotations

from typing import Any

import torch

from ..ops import broadcast, broadcast_object_list
from ..state.partial import PartialState
from ._batches import describe, materialize, tensors_of


def is_distributed() -> bool:
    """Whether this process is one of several in a job.

    That is a default process group of more than one process, or a state of several processes
    without one (XLA replicas, whose collectives go through torch_xla).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return True
    state = PartialState.current()
    return state is not None and state.num_processes > 1


def broadcast_object(obj: Any) -> Any:
    """Process 0's ``obj`` on every process."""
    return broadcast_object_list([obj])[0]


def broadcast_batch(batch: Any, device: torch.device) -> Any:
    """Process 0's ``batch`` (or None, meaning "no more batches") on every process, on ``device``.

    Process 0 sends the structure with the tensors' shapes first (non-tensor values travel in
    it); the others allocate the tensors from it, and all of them travel in one broadcast.
    What ``batch`` is on the other processes does not matter.
    """
    import torch.distributed as dist

    main = dist.get_rank() == 0
    spec = broadcast_object(describe(batch) if main else None)
    if spec is None:
        return None
    result = batch if main else materialize(spec, device)
    tensors = tensors_of(result)
    if tensors:
        broadcast(tensors, from_process=0)
    return result
