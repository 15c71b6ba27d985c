"""CUDA devices talking through NCCL, one device per local rank."""

from __future__ import annotations

import torch

from ..utils import cuda_fork
from ..utils.enums import DistributedType
from ..utils.environment import cuda_device_count
from .base import Backend, Finding


class CudaBackend(Backend):
    """NVIDIA GPUs: local rank ``i`` uses ``cuda:i`` (modulo the GPUs visible), nccl collectives."""

    name = "cuda"
    label = "CUDA GPUs"
    process_group_backend = "nccl"
    process_group_backends = ("nccl", "gloo", "cuda:nccl,cpu:gloo")
    distributed_type = DistributedType.MULTI_GPU
    preference = 20

    def is_available(self) -> bool:
        return cuda_device_count() > 0

    def device_count(self) -> int:
        return cuda_device_count()

    def kernel_hazard(self, start_method: str) -> Finding | None:
        """CUDA initialised in the kernel, by torch or by any other library (the driver says so),
        breaks every forked worker, whatever it runs on."""
        if start_method != "fork":
            return None
        state = cuda_fork.probe()
        if not state.initialized:
            return None
        what, why = cuda_fork.fork_finding_text(state)
        return Finding(
            what=what,
            why=why,
            fix="restart the kernel and keep every GPU use inside the launched function.",
            spawn_avoids=True,
        )

    def device_for(self, local_rank: int) -> torch.device:
        return torch.device("cuda", local_rank % max(1, self.device_count()))

    def memory_allocated(self, local_rank: int) -> int | None:
        try:
            if not torch.cuda.is_initialized():  # asking must not create a CUDA context
                return None
            return int(torch.cuda.memory_allocated(local_rank % torch.cuda.device_count()))
        except Exception:
            return None

    def set_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def barrier(self, device: torch.device) -> None:
        import torch.distributed as dist

        # Naming the device avoids NCCL guessing it (and warning) before the first collective.
        dist.barrier(device_ids=[device.index or 0])
