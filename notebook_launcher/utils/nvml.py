"""GPU facts asked through NVML, so that CUDA is never initialised in the asking process.

A kernel that initialised CUDA cannot fork workers that use it, so questions asked in the kernel
(free memory) go to the driver's management library instead.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    free_bytes: int
    total_bytes: int


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def _nvml_index(cuda_index: int) -> int:
    """The NVML index of a CUDA device index, honouring ``CUDA_VISIBLE_DEVICES``."""
    import torch

    try:
        return torch.cuda._get_nvml_device_index(cuda_index)
    except Exception:  # a private helper: fall back to the identity mapping
        return cuda_index


def gpu_info(cuda_index: int) -> GpuInfo | None:
    """Free and total memory of one CUDA device, or None if NVML cannot tell."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        return None
    try:
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(_nvml_index(cuda_index), ctypes.byref(handle)):
            return None
        memory = _Memory()
        if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)):
            return None
        return GpuInfo(int(memory.free), int(memory.total))
    finally:
        lib.nvmlShutdown()
