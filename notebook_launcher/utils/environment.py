"""Facts about the machine, read without initialising any device runtime."""

from __future__ import annotations

import contextlib
import os
import sys

from .validation import check_bool
from .versions import is_torch_version


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


_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off", "")


def str_to_bool(value: str) -> bool:
    """``True`` for "1", "true", "yes", "y", "t", "on"; ``False`` for their opposites and "".

    Raises:
        ValueError: for anything else (case is ignored).
    """
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(
        f"value={value!r} is not a valid switch: use one of {', '.join(_TRUE)} or "
        f"{', '.join(v for v in _FALSE if v)}"
    )


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Read an on/off switch from the environment variable ``key`` (unset: ``default``).

    Raises:
        ValueError: the variable holds something that is not a switch, naming the variable.
    """
    value = os.environ.get(key)
    if value is None:
        return default
    try:
        return str_to_bool(value)
    except ValueError:
        raise ValueError(
            f"environment variable {key}={value!r} is not valid: use 1/0, true/false, yes/no or on/off"
        )


def is_cuda_available() -> bool:
    """Whether a CUDA device can be used, asked without initialising CUDA in this process."""
    return cuda_device_count() > 0


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's Metal (MPS) device is usable with this torch (at least ``min_version``)."""
    import torch

    if not is_torch_version(">=", min_version):
        return False
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_built() and mps.is_available())


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Whether torch_xla is installed; with a ``check_*`` flag, whether it targets that device.

    Note:
        Importing torch_xla starts its runtime, so this never imports it: the device kind is
        read from ``PJRT_DEVICE`` (what torch_xla itself reads), so a TPU VM without
        ``PJRT_DEVICE=TPU`` set counts as "installed but no TPU".
    """
    import importlib.util

    check_bool("check_is_tpu", check_is_tpu)
    check_bool("check_is_gpu", check_is_gpu)
    if importlib.util.find_spec("torch_xla") is None:
        return False
    device = os.environ.get("PJRT_DEVICE", "").upper()
    if check_is_tpu:
        return device == "TPU"
    if check_is_gpu:
        return device in ("GPU", "CUDA")
    return True


def is_tpu_available(check_device: bool = True) -> bool:
    """Whether a TPU is usable through torch_xla (``check_device=False``: torch_xla installed).

    Note:
        Kept for code written against older Accelerate releases; it never creates an XLA
        device, see :func:`is_torch_xla_available`.
    """
    return is_torch_xla_available(check_is_tpu=check_device)


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bfloat16 can be used here (on a TPU: ``not ignore_tpu``).

    On CUDA this is torch's own answer (``torch.cuda.is_bf16_supported()``, which counts emulated
    bf16); if CUDA is not initialised yet it is not initialised to ask: torch supports bf16,
    natively or emulated, on every GPU it runs on. CPUs support bf16; MPS from macOS 14.
    """
    import torch

    check_bool("ignore_tpu", ignore_tpu)
    if is_torch_xla_available(check_is_tpu=True):
        return not ignore_tpu
    if is_cuda_available():
        return torch.cuda.is_bf16_supported() if torch.cuda.is_initialized() else True
    if is_mps_available():
        return bool(torch.backends.mps.is_macos_or_newer(14, 0))
    return True


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (whose frontend can show widgets)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return getattr(shell, "kernel", None) is not None


def one_output_area(stream: object) -> bool:
    """Whether ``stream`` is a notebook cell's output (ipykernel's), where each switch between
    stdout and stderr starts another output area and stderr is drawn as an error. A stream
    that passes its lines on to another (``passes_to``) is judged by that one."""
    stream = getattr(stream, "passes_to", stream)
    return type(stream).__module__.startswith("ipykernel")


def say(text: str) -> None:
    """Print a notice of the launcher's own: in a notebook with the cell's other output (not
    as an error), elsewhere on stderr."""
    stream = sys.stdout if one_output_area(sys.stdout) else sys.stderr
    print(text, file=stream, flush=True)
