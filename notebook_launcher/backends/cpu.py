"""CPU processes talking through gloo."""

from __future__ import annotations

import torch

from ..utils.environment import available_cpu_count
from .base import Backend


class CpuBackend(Backend):
    name = "cpu"
    process_group_backend = "gloo"

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return available_cpu_count()

    def device_for(self, local_rank: int) -> torch.device:
        return torch.device("cpu")
