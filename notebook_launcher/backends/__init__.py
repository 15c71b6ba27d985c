"""One class per device kind, chosen once per process: the one seam between the package and a device.

Adding a device is one module with a :class:`Backend` subclass and one line in :data:`BACKENDS`.
"""

from __future__ import annotations

import os
import sys

from ..protocol.context import current_context
from ..utils.enums import DistributedType
from ..utils.validation import check_bool
from .base import Backend, Finding
from .cpu import CpuBackend
from .cuda import CudaBackend
from .mps import MpsBackend
from .xla import XlaBackend

# Every device kind, by name.
BACKENDS: dict[str, type[Backend]] = {
    "cpu": CpuBackend,
    "cuda": CudaBackend,
    "mps": MpsBackend,
    "xla": XlaBackend,
}
_chosen: dict[bool, Backend] = {}


def backend_for(device: str) -> Backend:
    """The backend object for a device kind name ("cpu", "cuda", "mps" or "xla")."""
    try:
        return BACKENDS[device]()
    except (KeyError, TypeError):
        raise ValueError(
            f"device={device!r} is not valid: allowed values are {', '.join(map(repr, BACKENDS))}"
        )


def all_backends() -> list[Backend]:
    """One object of every backend, the most preferred first (the CPU, always there, last)."""
    return [cls() for cls in sorted(BACKENDS.values(), key=lambda cls: -cls.preference)]


def launch_backend() -> Backend:
    """The device a launch from this kernel runs on: the first available launchable one.

    Asked in the kernel, so nothing here initialises a device runtime.
    """
    return next(b for b in all_backends() if b.launchable and b.is_available())


def _in_multiprocess_job() -> bool:
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:  # torchrun and friends
        return True
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def detect_backend(cpu: bool = False) -> Backend:
    """The backend this process uses, decided on the first call and kept.

    In a worker of ``notebook_launcher`` the launch decided the device; elsewhere the first
    available of CUDA and MPS is used (MPS only for a single process), else the CPU. No device
    runtime is initialised to decide.

    Args:
        cpu: use the CPU whatever else exists.
    """
    check_bool("cpu", cpu)
    if cpu in _chosen:
        return _chosen[cpu]
    context = current_context()
    if cpu:
        chosen: Backend = CpuBackend()
    elif context is not None:
        chosen = backend_for(context.device)
    else:
        multiprocess = _in_multiprocess_job()
        chosen = next(
            b
            for b in all_backends()
            if b.auto_detect
            and b.is_available()
            and not (multiprocess and b.distributed_type is DistributedType.NO)
        )
    _chosen[cpu] = chosen
    return chosen


def reset_backend_choice() -> None:
    """Forget the choice (a fresh worker process decides again)."""
    _chosen.clear()


__all__ = [
    "BACKENDS",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "Finding",
    "MpsBackend",
    "XlaBackend",
    "all_backends",
    "backend_for",
    "detect_backend",
    "launch_backend",
    "reset_backend_choice",
]
