"""The primitive collectives of this process's job, chosen once from its state and backend.

The public operations (``gather``, ``reduce`` ...) work on nested structures and decide *what* to
send; a :class:`Communicator` only knows *how* to send a tensor or an object on one kind of
process group. :func:`current` maps the :class:`PartialState`'s backend to one communicator and
keeps it until the state is created again.
"""

from __future__ import annotations

from typing import Any

import torch

from ..state.partial import PartialState
from ..utils.replicas import ReplicaLocal


class Communicator:
    """Collectives over ``torch.distributed``'s default process group (gloo, nccl, mpi).

    Attributes:
        rank, world_size: this process's index and the number of processes.
        device: the state's device.
        control_device: where small bookkeeping tensors (sizes, RNG states) must live for the
            process group (the CPU where gloo or mpi serves it, else ``device``).
    """

    def __init__(self, state: PartialState) -> None:
        self._shared = state._shared_state
        self._backend = state._backend
        self.device: torch.device = state.device
        self.rank: int = state.process_index
        self.world_size: int = state.num_processes if state.use_distributed else 1
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

    def is_current(self, shared: dict[str, Any]) -> bool:
        """Whether this communicator still belongs to the state in ``shared``."""
        return shared.get("_backend") is self._backend and shared.get("device") is self.device

    @property
    def debug(self) -> bool:
        """Whether the state's debug mode is on (read on every call: it may be switched)."""
        return bool(self._shared.get("debug"))

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


class SharedMemoryCommunicator(Communicator):
    """A CPU (gloo) job's collectives: tensors through shared memory when every rank runs on
    this machine (see :mod:`notebook_launcher.ops.shared_memory`), else over gloo.

    The exchange is made by the first collective (every rank makes that call, whichever it is),
    so that creating the communicator alone, which one rank may do, starts nothing collective.
    The object collectives go through it too (pickles), so that every collective of the job's
    operations is checked against the other ranks' calls, and a peer that dies in one is noticed.
    """

    EXCHANGE_BYTES = 4 * 2**20  # shared memory for the slots of every rank together

    def __init__(self, state: PartialState) -> None:
        super().__init__(state)
        self._exchange: Any = None
        self._tried = self.world_size == 1

    def _local(self, *tensors: torch.Tensor) -> Any:
        """The exchange, for CPU tensors (None: use gloo)."""
        if not self._tried:
            from . import shared_memory

            self._tried = True
            slot = self.EXCHANGE_BYTES // (2 * self.world_size)
            self._exchange = shared_memory.SharedMemoryExchange.create(slot)
        if self._exchange is None or any(t.device.type != "cpu" for t in tensors):
            return None
        return self._exchange

    def all_gather_into(self, output: torch.Tensor, tensor: torch.Tensor) -> None:
        exchange = self._local(output, tensor)
        if exchange is None:
            super().all_gather_into(output, tensor)
        else:
            exchange.all_gather_(output, tensor)

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        exchange = self._local(tensor)
        if exchange is None:
            super().all_reduce_sum(tensor)
        else:
            exchange.all_reduce_(tensor)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        exchange = self._local(tensor)
        if exchange is None:
            super().broadcast(tensor, src)
        else:
            exchange.broadcast_(tensor, src)

    def all_gather_object(self, obj: Any) -> list[Any]:
        exchange = self._local()
        if exchange is None:
            return super().all_gather_object(obj)
        return exchange.all_gather_object(obj)

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        exchange = self._local()
        if exchange is None:
            super().broadcast_object_list(objects, src)
        else:
            exchange.broadcast_object_list(objects, src)


class XlaCommunicator(Communicator):
    """Collectives of XLA replicas through torch_xla: ``xm.all_gather``, ``xm.all_reduce``,
    ``xm.rendezvous``. Tensors travel on the replica's XLA device and come back where they were.
    """

    def __init__(self, state: PartialState) -> None:
        import torch_xla.core.xla_model as xm

        self._shared = state._shared_state
        self._backend = state._backend
        self._xm = xm
        self.device = state.device
        self.rank = state.process_index
        self.world_size = state.num_processes if state.use_distributed else 1
        self.control_device = self.device
        self._calls = 0

    def all_gather_into(self, output: torch.Tensor, tensor: torch.Tensor) -> None:
        gathered = self._xm.all_gather(tensor.to(self.device), dim=0)
        output.copy_(gathered.reshape(output.shape).to(output.device))

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        work = tensor.to(self.device)
        self._xm.all_reduce(self._xm.REDUCE_SUM, [work])  # a list is reduced in place
        if work is not tensor:
            tensor.copy_(work.to(tensor.device))

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        # A sum in which every replica but ``src`` contributes zeros.
        work = tensor.to(self.device, copy=True)
        if self.rank != src:
            work.zero_()
        self._xm.all_reduce(self._xm.REDUCE_SUM, [work])
        tensor.copy_(work.to(tensor.device))

    def all_gather_object(self, obj: Any) -> list[Any]:
        import pickle

        self._calls += 1
        tag = f"notebook_launcher.objects.{self._calls}"
        return [pickle.loads(p) for p in self._xm.rendezvous(tag, pickle.dumps(obj))]

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        objects[:] = self.all_gather_object(list(objects))[src]


# Backend name -> communicator class; the other torch.distributed backends use the default.
COMMUNICATORS: dict[str, type[Communicator]] = {
    "cpu": SharedMemoryCommunicator,
    "xla": XlaCommunicator,
}
_current = ReplicaLocal()  # per thread where XLA replicas are threads


def current() -> Communicator:
    """The communicator of this process's job, creating the :class:`PartialState` if needed."""
    shared = PartialState._shared_state
    comm = _current.get()
    if comm is not None and comm.is_current(shared):
        return comm
    state = PartialState()
    comm = COMMUNICATORS.get(state._backend.name, Communicator)(state)
    _current.set(comm)
    return comm
