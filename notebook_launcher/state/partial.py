"""PartialState: who this process is in the job, shared by every instance in the process."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..backends import Backend, backend_for
from ..launch.context import current_context
from .enums import DistributedType


@dataclass(frozen=True)
class _Topology:
    rank: int
    local_rank: int
    world_size: int
    device_kind: str
    launched: bool  # started by notebook_launcher or torchrun


def _topology(cpu: bool) -> _Topology:
    ctx = current_context()
    if ctx is not None:
        kind = "cpu" if cpu else ctx.device
        return _Topology(ctx.rank, ctx.local_rank, ctx.world_size, kind, True)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        kind = "cpu" if cpu or not torch.cuda.is_available() else "cuda"
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        return _Topology(rank, local, world, kind, True)
    kind = "cpu" if cpu or not torch.cuda.is_available() else "cuda"
    return _Topology(0, 0, 1, kind, False)


class PartialState:
    """The job as seen by this process: rank, world size, device, process group.

    Every instance shares one state (created by the first instantiation), so it can be created
    anywhere. In a worker started by ``notebook_launcher`` or torchrun the process group is set
    up on first use: gloo on CPU, nccl on GPUs — no ``cpu=True`` needed to join the job.

    Args:
        cpu: use the CPU even where GPUs exist.
        **kwargs: accepted for compatibility; ``backend`` overrides the process-group backend.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        if self._shared_state:
            return
        topo = _topology(cpu)
        backend: Backend = backend_for(topo.device_kind)
        self._backend = backend
        self.backend = kwargs.get("backend") or backend.process_group_backend
        self.num_processes = topo.world_size
        self.process_index = topo.rank
        self.local_process_index = topo.local_rank
        self.device = backend.device_for(topo.local_rank)
        self.debug = False
        if topo.world_size > 1:
            import torch.distributed as dist

            backend.set_device(self.device)
            if not dist.is_initialized():
                dist.init_process_group(
                    self.backend, init_method="env://", rank=topo.rank, world_size=topo.world_size
                )
            self.distributed_type = (
                DistributedType.MULTI_GPU
                if topo.device_kind == "cuda"
                else DistributedType.MULTI_CPU
            )
        else:
            self.distributed_type = DistributedType.NO

    @property
    def initialized(self) -> bool:
        return bool(self._shared_state)

    @property
    def use_distributed(self) -> bool:
        return self.distributed_type != DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (no-op in a single process)."""
        if self.use_distributed:
            import torch.distributed as dist

            dist.barrier()

    @contextmanager
    def main_process_first(self):
        """Run the block on the main process first, then on the others."""
        if not self.is_main_process:
            self.wait_for_everyone()
        yield
        if self.is_main_process:
            self.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.is_main_process:
            print(*args, **kwargs)

    def destroy_process_group(self) -> None:
        import torch.distributed as dist

        if self.use_distributed and dist.is_initialized():
            dist.destroy_process_group()

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type.value}  Backend: {self.backend}\n"
            f"Num processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )

    @classmethod
    def _reset_state(cls) -> None:
        cls._shared_state.clear()
