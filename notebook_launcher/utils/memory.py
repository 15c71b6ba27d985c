"""How much memory each device may use: sizes such as ``"10GiB"`` and the machine's free memory."""

from __future__ import annotations

import re
import warnings

from .environment import cuda_device_count, is_mps_available
from .nvml import gpu_info
from .validation import invalid

MemoryMap = dict[int | str, int]

_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_BINARY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT]?)(i?)([Bb]))?\s*$", re.IGNORECASE)
NAMED_DEVICES = ("mps", "cpu", "disk")


def convert_file_size_to_int(size: int | str) -> int:
    """A size in bytes from an int or a string such as ``"5GB"``, ``"10GiB"``, ``"500MB"``.

    Decimal units (KB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers
    of 1024; as in Accelerate, a lowercase ``b`` after a decimal unit means bits (``"8Mb"`` is
    1 MB). A plain number is bytes.

    Raises:
        TypeError: ``size`` is neither an int nor a str.
        ValueError: the string is not a size, or the size is negative.
    """
    allowed = "expected bytes as an int >= 0 or a string such as '10GiB', '500MB' or '2.5GB'"
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise invalid("size", size, allowed, TypeError)
    if isinstance(size, int):
        if size < 0:
            raise invalid("size", size, allowed)
        return size
    match = _SIZE.match(size)
    if match is None:
        raise invalid("size", size, allowed)
    number, prefix, binary, unit = match.groups()
    prefix = (prefix or "").upper()
    if binary and not prefix:
        raise invalid("size", size, allowed)
    scale = _BINARY_UNITS[prefix] if binary else _UNITS[prefix]
    value = int(float(number) * scale)
    return value // 8 if unit == "b" and not binary else value


def _free_gpu_memory() -> MemoryMap:
    import torch

    free: MemoryMap = {}
    for index in range(cuda_device_count()):
        if torch.cuda.is_initialized():
            try:
                free[index] = int(torch.cuda.mem_get_info(index)[0])
            except RuntimeError:  # a device that cannot be used is left out, as Accelerate does
                continue
        else:
            info = gpu_info(index)
            if info is not None:
                free[index] = info.free_bytes
    return free


def _shares_host_memory() -> bool:
    """Integrated GPUs (Jetson, GH200 unified memory) use host RAM: no separate CPU budget."""
    import torch

    if not torch.cuda.is_initialized():
        return False
    return any(
        getattr(torch.cuda.get_device_properties(i), "is_integrated", False)
        for i in range(torch.cuda.device_count())
    )


def get_max_memory(max_memory: dict[int | str, int | str] | None = None) -> MemoryMap:
    """The memory each device may use, in bytes.

    Args:
        max_memory: None to measure what is free now; or a dict whose keys are GPU indices
            (ints), ``"mps"``, ``"cpu"`` or ``"disk"`` and whose values are byte counts or
            size strings (see :func:`convert_file_size_to_int`).

    Returns:
        A new dict in placement order: GPUs by index, then ``"mps"``, ``"cpu"``, ``"disk"``.
        Measured: free memory of each GPU, and the available RAM under ``"cpu"`` (``"mps"`` on
        Apple silicon, where the two are one memory). On a CPU-only machine that is just
        ``{"cpu": available_bytes}``.

    Note:
        Free GPU memory is read through NVML while CUDA is not initialised in this process, so
        calling this in a notebook before launching does not break fork-started workers.

    Raises:
        TypeError, ValueError: an unknown device key or an unreadable size, naming it.
    """
    import psutil

    if max_memory is None:
        measured = _free_gpu_memory()
        if is_mps_available():
            measured["mps"] = psutil.virtual_memory().available
        elif not _shares_host_memory():
            measured["cpu"] = psutil.virtual_memory().available
        return measured
    if not isinstance(max_memory, dict):
        raise invalid(
            "max_memory",
            max_memory,
            "expected a dict such as {0: '10GiB', 'cpu': '30GiB'} or None",
            TypeError,
        )
    sizes: MemoryMap = {}
    for key, value in max_memory.items():
        gpu = isinstance(key, int) and not isinstance(key, bool) and key >= 0
        if not gpu and key not in NAMED_DEVICES:
            raise ValueError(
                f"max_memory={max_memory!r} is not valid: the key {key!r} is not a device; "
                "keys are GPU indices (ints >= 0), 'mps', 'cpu' or 'disk'."
            )
        sizes[key] = convert_file_size_to_int(value)
    gpus = sorted(k for k in sizes if isinstance(k, int))
    count = cuda_device_count()
    for index in gpus:
        if index >= count:
            warnings.warn(
                f"max_memory names GPU {index}, but this machine has {count} GPU(s)", stacklevel=2
            )
    return {key: sizes[key] for key in [*gpus, *(k for k in NAMED_DEVICES if k in sizes)]}
