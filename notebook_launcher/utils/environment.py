"""Facts about the machine, read without initialising any device runtime."""

from __future__ import annotations

import contextlib
import os


def available_cpu_count() -> int:
    """Cores this process may run on (respects CPU affinity and cgroup pinning)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def patch_environment(**values: str):
    """Set environment variables for the duration of a block, then restore them exactly."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update({key: str(value) for key, value in values.items()})
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def cuda_device_count() -> int:
    """Number of CUDA devices, asked through NVML so that CUDA is not initialised in this process.

    A process that initialised CUDA cannot fork workers that use CUDA, so the kernel must only
    ever ask this way.
    """
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    with patch_environment(PYTORCH_NVML_BASED_CUDA_CHECK="1"):
        if not torch.cuda.is_available():
            return 0
        return torch.cuda.device_count()


def cuda_initialized() -> bool:
    """Whether this process already holds a CUDA context (checked without creating one)."""
    import torch

    return bool(torch.cuda.is_initialized())
