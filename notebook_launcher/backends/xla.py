"""XLA devices (TPUs, or the CPU through PJRT): replicas started by xmp.spawn."""

from __future__ import annotations

import torch

from ..utils.enums import DistributedType
from ..utils.environment import is_torch_xla_available
from .base import Backend

BARRIER_TAG = "notebook_launcher.wait_for_everyone"


class XlaBackend(Backend):
    """Devices reached through torch_xla: one replica per device, collectives through XLA.

    Ranks and sizes come from ``torch_xla.runtime`` (``global_ordinal()``, ``local_ordinal()``,
    ``world_size()``), read by the replica bootstrap; no ``torch.distributed`` process group is
    created (collectives use ``xm.all_reduce``, ``xm.all_gather`` and ``xm.rendezvous``).
    Chosen by name only (a launch on an XLA host), never automatically: picking it in the
    kernel would start the XLA runtime there, after which ``xmp.spawn`` fails.
    """

    name = "xla"
    process_group_backend = "xla"
    process_group_backends = ("xla",)
    distributed_type = DistributedType.XLA
    default_start_method = "xla"
    creates_process_group = False

    def is_available(self) -> bool:
        return is_torch_xla_available(check_is_tpu=True)

    def device_count(self) -> int:
        """Replicas ``xmp.spawn`` would start, read from the environment (0 if no XLA device)."""
        from ..launch.xla_env import detect_xla

        found = detect_xla()
        return found.replicas if found.usable else 0

    def device_for(self, local_rank: int) -> torch.device:
        """This replica's XLA device (``torch_xla.device()``); the same for every local rank."""
        try:
            import torch_xla
        except ImportError as exc:
            raise RuntimeError(
                "XLA devices need torch_xla, which is not installed here: install the torch_xla "
                "that matches this torch (on a TPU host), or use the CPU or CUDA backend"
            ) from exc
        return torch.device(torch_xla.device())

    def barrier(self, device: torch.device) -> None:
        import torch_xla.core.xla_model as xm

        xm.rendezvous(BARRIER_TAG)

    @staticmethod
    def ordinals() -> tuple[int, int, int]:
        """(global ordinal, local ordinal, world size) of the calling replica."""
        import torch_xla.runtime as xr

        return int(xr.global_ordinal()), int(xr.local_ordinal()), int(xr.world_size())

    @staticmethod
    def autocast_dtype(mixed_precision: str) -> torch.dtype | None:
        """The autocast dtype for ``mixed_precision`` on XLA: bfloat16 for "bf16", else None.

        Raises:
            ValueError: ``mixed_precision`` is one XLA devices do not support ("fp16", "fp8").
        """
        if mixed_precision in ("no", None):
            return None
        if mixed_precision == "bf16":
            return torch.bfloat16
        raise ValueError(
            f"mixed_precision={mixed_precision!r} is not valid on XLA devices: use 'no' or 'bf16'"
        )
