"""CPU processes talking through gloo, and through shared memory where every rank is on this
machine (see :mod:`.shared_memory`): the collectives of ``ops`` and DDP's gradients."""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..utils.enums import DistributedType
from ..utils.environment import available_cpu_count
from .base import Backend
from .comm import Communicator
from .shared_memory import (
    DEFAULT_TIMEOUT,
    SharedMemoryExchange,
    align_steps,
    dist_all,
    steps_taken,
)


class CpuBackend(Backend):
    """The host CPU: always available, one device shared by every process, gloo collectives."""

    name = "cpu"
    label = "CPUs"
    process_group_backend = "gloo"
    process_group_backends = ("gloo", "mpi")
    distributed_type = DistributedType.MULTI_CPU
    accelerator = False
    # The communicator last made for the job's collectives: the barrier uses its exchange.
    _communicator: SharedMemoryCommunicator | None = None

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        """Usable cores (the most CPU processes worth starting)."""
        return available_cpu_count()

    def device_for(self, local_rank: int) -> torch.device:
        return torch.device("cpu")

    def communicator(self, state: Any) -> Communicator:
        self._communicator = SharedMemoryCommunicator(state)
        return self._communicator

    def collectives_position(self) -> tuple[int, ...]:
        """The process group's sequence number and the steps of the shared-memory exchanges
        (the collectives' and DDP's gradients')."""
        return (*super().collectives_position(), *steps_taken())

    def forget_collectives(self) -> None:
        """Close the exchange of the job's collectives; the next collective makes a new one."""
        if self._communicator is not None:
            self._communicator.close()
        self._communicator = None

    def regrouped(self) -> None:
        """The exchanges left open (DDP models' gradients) resume at one step on every rank."""
        align_steps()

    def barrier(self, device: torch.device) -> None:
        """Through the shared-memory exchange once the job's collectives use one, as a step of
        its own: a rank whose peer runs another collective then raises the mismatch at once,
        where gloo's barrier and the exchange would wait for each other until the timeout.
        Otherwise gloo's barrier."""
        communicator = self._communicator
        if communicator is None or not communicator.barrier():
            super().barrier(device)

    def register_ddp_hook(self, model: Any, state: Any) -> bool:
        """Carry ``model``'s gradients (a DistributedDataParallel of CPU parameters) through
        shared memory where the job allows; collective. Whether the hook was registered.

        A rank waits for the others at each step as long as the process group would.
        """
        params = [p for p in model.parameters() if p.requires_grad]
        on_cpu = all(p.device.type == "cpu" for p in params)
        if not dist_all(on_cpu and bool(params)):
            return False
        needed = sum(p.numel() * p.element_size() for p in params)
        exchange = SharedMemoryExchange.create(state, needed, group_timeout())
        if exchange is None:
            return False
        model.register_comm_hook(state=exchange, hook=all_reduce_hook)
        model.register_comm_hook = functools.partial(_register_instead, model, exchange)
        return True


class SharedMemoryCommunicator(Communicator):
    """A CPU (gloo) job's collectives: tensors through shared memory when every rank runs on
    this machine, else over gloo.

    The exchange is made by the first collective (every rank makes that call, whichever it is),
    so that creating the communicator alone, which one rank may do, starts nothing collective.
    The object collectives go through it too (pickles), so that every collective of the job's
    operations is checked against the other ranks' calls, and a peer that dies in one is noticed.
    """

    EXCHANGE_BYTES = 4 * 2**20  # shared memory for the slots of every rank together

    def __init__(self, state: Any) -> None:
        super().__init__(state)
        self._state = state
        self._exchange: Any = None
        self._tried = self.world_size == 1

    def _local(self, *tensors: torch.Tensor) -> Any:
        """The exchange, for CPU tensors (None: use gloo)."""
        if not self._tried:
            self._tried = True
            slot = self.EXCHANGE_BYTES // (2 * self.world_size)
            self._exchange = SharedMemoryExchange.create(self._state, slot)
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

    def close(self) -> None:
        """Release the exchange (the job's collectives then go through a new communicator)."""
        if self._exchange is not None:
            self._exchange.close()
        self._exchange, self._tried = None, True

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

    def barrier(self) -> bool:
        """Wait for every rank through the exchange, as long as the process group would, if the
        job's collectives made one; whether they did.

        The barrier does not make the exchange: a rank may have made this communicator alone,
        while the exchange exists on every rank of the job or on none (its first collective
        makes it), so every rank takes the same way through the barrier.
        """
        exchange = self._exchange
        if exchange is None or not self.is_current(self._state):  # a state made since: gloo
            return False
        exchange.barrier(group_timeout())
        return True


def all_reduce_hook(exchange: SharedMemoryExchange, bucket):
    """A DistributedDataParallel communication hook: the bucket's mean over the ranks.

    (DDP checks the hook's annotations against its own classes, so there are none here.)
    """
    if exchange.delegate is not None:
        state, hook = exchange.delegate
        return hook(state, bucket)
    tensor = exchange.all_reduce_(bucket.buffer(), divisor=exchange.world_size)
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(tensor)
    return future


def group_timeout() -> float:
    """The default process group's timeout in seconds (gloo's, as set by init_process_group)."""
    import torch.distributed as dist

    try:
        group = dist.distributed_c10d._get_default_group()
        return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    except (AttributeError, RuntimeError):  # private API moved: gloo's documented default
        return DEFAULT_TIMEOUT


def _register_instead(
    model: Any, exchange: SharedMemoryExchange | None, state: Any, hook: Any
) -> None:
    """``model.register_comm_hook`` once ours is registered: the user's hook takes over.

    DDP accepts one communication hook per model; a user who registers theirs after
    ``prepare`` (as works with Accelerate, which registers none by default) gets it called for
    every bucket, with DDP's own checks of the hook, and a second one is refused as DDP
    refuses it.
    """
    if exchange is None:  # a copy of the model (see __reduce__): DDP's own registration
        type(model).register_comm_hook(model, state, hook)
        return
    if exchange.delegate is not None:
        raise RuntimeError(
            "register_comm_hook can only be called once per model (DistributedDataParallel "
            "accepts one communication hook)"
        )
    type(model)._check_comm_hook(model, hook)
    exchange.delegate = (state, hook)
    model._comm_hooks.append((hook, state))
