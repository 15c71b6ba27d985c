"""One class per device kind, chosen once per process."""

from __future__ import annotations

from .base import Backend
from .cpu import CpuBackend
from .cuda import CudaBackend

_BACKENDS: dict[str, type[Backend]] = {"cpu": CpuBackend, "cuda": CudaBackend}


def backend_for(device: str) -> Backend:
    """The backend object for a device kind name ("cpu" or "cuda")."""
    try:
        return _BACKENDS[device]()
    except KeyError:
        raise ValueError(f"device={device!r} is not valid: allowed values are {sorted(_BACKENDS)}")


__all__ = ["Backend", "CpuBackend", "CudaBackend", "backend_for"]
