"""CUDA devices talking through NCCL, one device per local rank."""

from __future__ import annotations

import torch

from ..utils.enums import DistributedType
from ..utils.environment import cuda_device_count
from .base import Backend


class CudaBackend(Backend):
    """NVIDIA GPUs: local rank ``i`` uses ``cuda:i`` (modulo the GPUs visible), nccl collectives."""

    name = "cuda"
    process_group_backend = "nccl"
    process_group_backends = ("nccl", "gloo", "cuda:nccl,cpu:gloo")
    distributed_type = DistributedType.MULTI_GPU

    def is_available(self) -> bool:
        return cuda_device_count() > 0

    def device_count(self) -> int:
        return cuda_device_count()

    def device_for(self, local_rank: int) -> torch.device:
        return torch.device("cuda", local_rank % max(1, self.device_count()))

    def set_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def barrier(self, device: torch.device) -> None:
        import torch.distributed as dist

        # Naming the device avoids NCCL guessing it (and warning) before the first collective.
        dist.barrier(device_ids=[device.index or 0])
