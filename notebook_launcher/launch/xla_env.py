"""Is this a TPU (or another XLA device) host? Decided from the environment, never by importing.

Importing ``torch_xla`` in the kernel is harmless, but touching a device starts the XLA runtime,
after which every ``xmp.spawn`` fails until the kernel restarts. So detection reads only
environment variables and whether ``torch_xla`` could be imported (``importlib.util.find_spec``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

# Set on TPU VMs and in Colab and Kaggle TPU sessions (any one is enough).
TPU_VARIABLES = (
    "TPU_NAME",
    "COLAB_TPU_ADDR",
    "TPU_ACCELERATOR_TYPE",
    "TPU_WORKER_ID",
    "KAGGLE_TPU",
    "KAGGLE_DATA_PROXY_TOKEN_TPU",
)
# Cores of one host of each TPU generation, as Accelerate documents (8 on a v2/v3 host).
DEFAULT_TPU_CORES = 8


@dataclass(frozen=True)
class XlaEnvironment:
    """What the kernel can tell about XLA without initialising it.

    Attributes:
        torch_xla: whether ``torch_xla`` is importable.
        device_type: what ``PJRT_DEVICE`` names (upper case), "TPU" when only the TPU variables
            say so, or "" when nothing points at XLA.
        tpu_hint: the TPU variable that was found, or "".
        replicas: how many replicas ``xmp.spawn`` will start here (0 if unknown).
    """

    torch_xla: bool
    device_type: str
    tpu_hint: str
    replicas: int

    @property
    def usable(self) -> bool:
        """Whether launches go through ``xmp.spawn``: torch_xla is there and a device is named."""
        return self.torch_xla and bool(self.device_type)

    def describe(self) -> str:
        """One line for people: what was found and what a launch will do."""
        if self.usable:
            return (
                f"XLA device {self.device_type} ({self.replicas or 'unknown number of'} replicas): "
                "launches go through torch_xla's xmp.spawn"
            )
        if self.device_type:
            return (
                f"a {self.device_type} is announced ({self.tpu_hint or 'PJRT_DEVICE'}) but "
                "torch_xla is not installed: launches run CPU processes"
            )
        if self.torch_xla:
            return "torch_xla is installed but no XLA device is named (PJRT_DEVICE): CPU processes"
        return "no TPU or XLA device: launches run CPU or GPU processes"


def _int(environ: Mapping[str, str], name: str) -> int:
    try:
        return max(0, int(environ.get(name, "")))
    except ValueError:
        return 0


def detect_xla(environ: Mapping[str, str] | None = None) -> XlaEnvironment:
    """Read the environment (``os.environ`` by default) for an XLA device, initialising nothing.

    ``PJRT_DEVICE`` names the device as torch_xla reads it; without it, any of the TPU variables
    (Colab's ``COLAB_TPU_ADDR``, ``TPU_NAME``, Kaggle's ...) means a TPU. The replica count
    is ``CPU_NUM_DEVICES`` (default 1) on the CPU, ``TPU_NUM_DEVICES`` or 8 on a TPU host.

    Raises:
        TypeError: ``environ`` is not a mapping.
    """
    if environ is None:
        environ = os.environ
    if not isinstance(environ, Mapping):
        raise TypeError(f"environ={environ!r} is not valid: expected a mapping or None")
    available = "torch_xla" in sys.modules or importlib.util.find_spec("torch_xla") is not None
    hint = next((name for name in TPU_VARIABLES if environ.get(name)), "")
    device = environ.get("PJRT_DEVICE", "").strip().upper() or ("TPU" if hint else "")
    replicas = 0
    if device == "CPU":
        replicas = _int(environ, "CPU_NUM_DEVICES") or 1
    elif device == "TPU":
        replicas = _int(environ, "TPU_NUM_DEVICES") or DEFAULT_TPU_CORES
    return XlaEnvironment(available, device, hint, replicas)


def xla_initialized() -> bool:
    """Whether this process has started the XLA runtime (only asked if torch_xla was imported)."""
    module = sys.modules.get("torch_xla")
    check = getattr(getattr(module, "_XLAC", None), "_xla_runtime_is_initialized", None)
    if check is None:
        return False
    try:
        return bool(check())
    except Exception:
        return False
