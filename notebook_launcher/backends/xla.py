"""XLA devices (TPUs): a placeholder until the TPU launcher lands."""

from __future__ import annotations

import os

import torch

from ..state.enums import DistributedType
from ..utils.environment import is_torch_xla_available
from .base import Backend

NOT_YET = (
    "TPU/XLA devices are not supported by this version of notebook_launcher: TPU support comes "
    "with the TPU launcher (xmp.spawn). Use cpu=True to run on the CPU meanwhile."
)


class XlaBackend(Backend):
    """TPUs through torch_xla: detected, but not usable until the TPU launcher exists."""

    name = "xla"
    process_group_backend = "xla"
    process_group_backends = ("xla",)
    distributed_type = DistributedType.XLA
    default_start_method = "fork"  # xmp.spawn(start_method="fork")

    def is_available(self) -> bool:
        return is_torch_xla_available(check_is_tpu=True)

    def device_count(self) -> int:
        """Devices announced by ``TPU_NUM_DEVICES`` (0 if unset: counting would start XLA)."""
        if not self.is_available():
            return 0
        try:
            return int(os.environ.get("TPU_NUM_DEVICES", "0"))
        except ValueError:
            return 0

    def device_for(self, local_rank: int) -> torch.device:
        raise NotImplementedError(NOT_YET)

    def set_device(self, device: torch.device) -> None:
        raise NotImplementedError(NOT_YET)

    def barrier(self, device: torch.device) -> None:
        raise NotImplementedError(NOT_YET)
