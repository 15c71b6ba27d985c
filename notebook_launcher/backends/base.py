"""The interface every device backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ..utils.enums import DistributedType


class Backend(ABC):
    """A device kind: how to find it, which process-group backend it uses, how to pick a device.

    Attributes:
        name: the device kind ("cpu", "cuda", "mps", "xla").
        process_group_backend: the ``torch.distributed`` backend a job on it uses by default.
        process_group_backends: every ``torch.distributed`` backend accepted for it.
        distributed_type: the :class:`DistributedType` of a multi-process job on this device
            (``NO`` where jobs of several processes are not supported).
        default_start_method: how the launcher should start workers for this device.
        accelerator: False for the CPU, True for devices other than the host.
        creates_process_group: whether a job creates a ``torch.distributed`` process group.
    """

    name: str
    process_group_backend: str
    process_group_backends: tuple[str, ...]
    distributed_type: DistributedType
    default_start_method: str = "fork"
    accelerator: bool = True
    creates_process_group: bool = True  # False where collectives bypass torch.distributed

    @abstractmethod
    def is_available(self) -> bool:
        """Whether the device exists, checked without initialising its runtime."""

    @abstractmethod
    def device_count(self) -> int:
        """How many devices of this kind this process can see, without initialising them."""

    @abstractmethod
    def device_for(self, local_rank: int) -> torch.device:
        """The device a process with this local rank should use."""

    def set_device(self, device: torch.device) -> None:
        """Make ``device`` the current device of this process (no-op where there is none)."""

    def barrier(self, device: torch.device) -> None:
        """Wait for every rank of the default process group."""
        import torch.distributed as dist

        dist.barrier()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
