"""The interface every device backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class Backend(ABC):
    """A device kind: how to find it, which process-group backend it uses, how to pick a device."""

    name: str
    process_group_backend: str

    @abstractmethod
    def is_available(self) -> bool:
        """Whether the device exists, checked without initialising its runtime."""

    @abstractmethod
    def device_count(self) -> int:
        """How many devices of this kind this process can see."""

    @abstractmethod
    def device_for(self, local_rank: int) -> torch.device:
        """The device a process with this local rank should use."""

    def set_device(self, device: torch.device) -> None:
        """Make ``device`` the current device of this process (no-op where there is none)."""
