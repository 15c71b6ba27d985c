"""The interface every device backend implements: the one place that knows a kind of device.

The kernel asks a backend about the machine without touching the device (is it there, how many,
would forking now be safe, which start methods and precisions it takes); a worker asks it for
its device, its process-group backend, its collectives and its DDP hook.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from ..utils.enums import MIXED_PRECISION_CHOICES, DistributedType
from .comm import Communicator


@dataclass(frozen=True)
class Finding:
    """A problem found in the kernel before anything starts: what, why it matters, how to fix it."""

    what: str
    why: str
    fix: str
    spawn_avoids: bool = False  # workers started by spawn (fresh interpreters) are not affected

    def __str__(self) -> str:
        return f"{self.what}\nWhy it matters: {self.why}\nHow to fix it: {self.fix}"


class Backend(ABC):
    """A device kind: how to find it, how to launch on it, and what a worker uses on it.

    Attributes:
        name: the device kind ("cpu", "cuda", "mps", "xla").
        label: the devices in words, for messages ("CUDA GPUs").
        process_group_backend: the ``torch.distributed`` backend a job on it uses by default.
        process_group_backends: every ``torch.distributed`` backend accepted for it.
        distributed_type: the :class:`DistributedType` of a multi-process job on this device
            (``NO`` where jobs of several processes are not supported).
        start_methods: the only start methods that work for this device, the default first
            (empty: every start method the launcher offers, "fork" by default).
        precisions: the ``mixed_precision`` values a launch on it accepts.
        accelerator: False for the CPU, True for devices other than the host.
        creates_process_group: whether a job creates a ``torch.distributed`` process group.
        preference: the higher, the earlier it is picked among the available devices.
        launchable: whether the kernel launches on it when it is the first available device.
        auto_detect: whether a process that was not launched picks it when it is available.
    """

    name: str
    label: str
    process_group_backend: str
    process_group_backends: tuple[str, ...]
    distributed_type: DistributedType
    start_methods: tuple[str, ...] = ()
    precisions: tuple[str, ...] = MIXED_PRECISION_CHOICES
    accelerator: bool = True
    creates_process_group: bool = True  # False where collectives bypass torch.distributed
    preference: int = 0
    launchable: bool = True
    auto_detect: bool = True

    # -- asked in the kernel, never initialising the device -----------------------------------

    @abstractmethod
    def is_available(self) -> bool:
        """Whether the device exists, checked without initialising its runtime."""

    @abstractmethod
    def device_count(self) -> int:
        """How many devices of this kind this process can see, without initialising them."""

    @property
    def default_start_method(self) -> str:
        return self.start_methods[0] if self.start_methods else "fork"

    def start_method(self, requested: str) -> str:
        """The start method a launch asking for ``requested`` uses on this device."""
        if not self.start_methods or requested in self.start_methods:
            return requested
        return self.default_start_method

    def kernel_hazard(self, start_method: str) -> Finding | None:
        """What, in the kernel's current state, would break workers started with
        ``start_method`` (a device runtime the kernel already initialised), or None."""
        return None

    # -- used in a worker --------------------------------------------------------------------

    @abstractmethod
    def device_for(self, local_rank: int) -> torch.device:
        """The device a process with this local rank should use."""

    def set_device(self, device: torch.device) -> None:
        """Make ``device`` the current device of this process (no-op where there is none)."""

    def barrier(self, device: torch.device) -> None:
        """Wait for every rank of the default process group."""
        import torch.distributed as dist

        dist.barrier()

    def communicator(self, state: Any) -> Communicator:
        """The primitive collectives of the job ``state`` (a ``PartialState``) belongs to."""
        return Communicator(state)

    def collectives_position(self) -> tuple[int, ...]:
        """Where this rank stands in the job's sequence of collectives (the default process
        group's sequence number; -1 where it has none). Equal on every rank when no collective
        was left half done, so a session can keep the group after a failed call."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return (-1,)
        try:
            return (dist.distributed_c10d._get_default_group()._get_sequence_number_for_group(),)
        except (AttributeError, RuntimeError):  # a backend that keeps no sequence number
            return (-1,)

    def forget_collectives(self) -> None:
        """Drop what this device keeps for the job's collectives (the process group is about to
        be formed again)."""

    def regrouped(self) -> None:
        """The default process group was just formed again (collective over it): bring what
        this device keeps for the job's collectives back in step on every rank."""

    def memory_allocated(self, local_rank: int) -> int | None:
        """Bytes of device memory this process holds, for the live panels; None where unknown or
        where asking would initialise the device."""
        return None

    def register_ddp_hook(self, model: Any, state: Any) -> bool:
        """Give a ``DistributedDataParallel`` model this device's own gradient communication,
        where it has one; collective. Whether a hook was registered."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
