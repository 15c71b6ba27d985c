"""Primitive collectives: how to send a tensor or an object on one kind of process group.

The public operations (``gather``, ``reduce`` ...) work on nested structures and decide *what* to
send; a :class:`Communicator` only knows *how*. Each backend says which communicator its jobs use
(:meth:`Backend.communicator`); this one serves torch.distributed's process groups.
"""

from __future__ import annotations

from typing import Any

import torch


class Communicator:
    """Collectives over ``torch.distributed``'s default process group (gloo, nccl, mpi).

    Args:
        state: the job's ``PartialState``.

    Attributes:
        rank, world_size: this process's index and the number of processes.
        device: the state's device.
        control_device: where small bookkeeping tensors (sizes, RNG states) must live for the
            process group (the CPU where gloo or mpi serves it, else ``device``).
    """

    def __init__(self, state: Any) -> None:
        self._state = state
        self._backend = state.device_backend
        self.device: torch.device = state.device
        self.rank: int = state.process_index
        self.world_size: int = state.num_processes if state.use_distributed else 1
        self._group = default_group()  # the process group it was made for
        group = str(state.backend or "")
        cpu_ok = "gloo" in group or "mpi" in group or not group
        self.control_device = torch.device("cpu") if cpu_ok else self.device
        if self.world_size > 1:
            import torch.distributed as dist

            self._dist = dist
            # all_gather_single is the current name of all_gather_into_tensor.
            self._all_gather = getattr(dist, "all_gather_single", None) or (
                dist.all_gather_into_tensor
            )

    def is_current(self, state: Any) -> bool:
        """Whether this communicator still belongs to ``state`` (the job's current state)."""
        return (
            state.initialized
            and state.device_backend is self._backend
            and state.device is self.device
            and default_group() is self._group
        )

    @property
    def debug(self) -> bool:
        """Whether the state's debug mode is on (read on every call: it may be switched)."""
        return bool(getattr(self._state, "debug", False))

    @property
    def outside_a_job(self) -> bool:
        """Whether this process is not part of a job (a job of one launched process is one)."""
        from ..utils.enums import DistributedType

        kind = getattr(self._state, "distributed_type", DistributedType.NO)
        return self.world_size == 1 and kind is DistributedType.NO

    def all_gather_into(self, output: torch.Tensor, tensor: torch.Tensor) -> None:
        """Fill ``output`` (``world_size`` times the rows of ``tensor``) with every rank's tensor."""
        self._all_gather(output, tensor)

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        """Sum ``tensor`` over all ranks, in place."""
        self._dist.all_reduce(tensor)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """Overwrite ``tensor`` with rank ``src``'s, in place (``tensor`` must be contiguous)."""
        self._dist.broadcast(tensor, src)

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's (picklable) ``obj``, in rank order."""
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        """Overwrite the items of ``objects`` with rank ``src``'s, in place."""
        self._dist.broadcast_object_list(objects, src)


def default_group() -> Any:
    """The default process group of this process (None before one is formed): a communicator
    made for another group (a session formed it again) is not current."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.group.WORLD
