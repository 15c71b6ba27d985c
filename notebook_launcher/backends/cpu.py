"""CPU processes talking through gloo."""

from __future__ import annotations

import torch

from ..utils.enums import DistributedType
from ..utils.environment import available_cpu_count
from .base import Backend


class CpuBackend(Backend):
    """The host CPU: always available, one device shared by every process, gloo collectives."""

    name = "cpu"
    process_group_backend = "gloo"
    process_group_backends = ("gloo", "mpi")
    distributed_type = DistributedType.MULTI_CPU
    accelerator = False

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        """Usable cores (the most CPU processes worth starting)."""
        return available_cpu_count()

    def device_for(self, local_rank: int) -> torch.device:
        return torch.device("cpu")
