"""Apple silicon's Metal device: one process, no process groups."""

from __future__ import annotations

import os

import torch

from ..utils.enums import DistributedType
from ..utils.environment import is_mps_available
from .base import Backend


class MpsBackend(Backend):
    """Apple silicon's GPU through Metal, for a single process (never launched on)."""

    name = "mps"
    label = "Apple GPUs (MPS)"
    process_group_backend = "gloo"
    process_group_backends = ("gloo",)
    distributed_type = DistributedType.NO  # torch has no collectives on MPS tensors
    preference = 10
    start_methods = ("spawn",)  # fork is unsafe with macOS system frameworks
    launchable = False

    def is_available(self) -> bool:
        return is_mps_available()

    def device_count(self) -> int:
        return 1 if self.is_available() else 0

    def device_for(self, local_rank: int) -> torch.device:
        return torch.device("mps")

    def set_device(self, device: torch.device) -> None:
        # Ops without an MPS kernel fall back to the CPU instead of failing, as in Accelerate.
        os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
