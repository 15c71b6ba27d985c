"""XLA devices (TPUs, or the CPU through PJRT): replicas started by xmp.spawn.

Is this a TPU (or another XLA device) host? The kernel decides from the environment, never by
importing: importing ``torch_xla`` in the kernel is harmless, but touching a device starts the
XLA runtime, after which every ``xmp.spawn`` fails until the kernel restarts. So detection reads
only environment variables and whether ``torch_xla`` could be imported
(``importlib.util.find_spec``).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..utils.enums import DistributedType
from .base import Backend, Finding
from .comm import Communicator

BARRIER_TAG = "notebook_launcher.wait_for_everyone"
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


class XlaBackend(Backend):
    """Devices reached through torch_xla: one replica per device, collectives through XLA.

    Ranks and sizes come from ``torch_xla.runtime`` (``global_ordinal()``, ``local_ordinal()``,
    ``world_size()``), read by the replica bootstrap; no ``torch.distributed`` process group is
    created (collectives use ``xm.all_reduce``, ``xm.all_gather`` and ``xm.rendezvous``).
    Never picked automatically in a process that was not launched: picking it in the kernel
    would start the XLA runtime there, after which ``xmp.spawn`` fails. The kernel launches on
    it when the environment names an XLA device (:func:`detect_xla`).
    """

    name = "xla"
    label = "XLA devices (TPUs)"
    process_group_backend = "xla"
    process_group_backends = ("xla",)
    distributed_type = DistributedType.XLA
    preference = 30
    start_methods = ("xla",)  # xmp.spawn, whatever the launch asked for
    precisions = ("no", "bf16")
    creates_process_group = False
    auto_detect = False

    def is_available(self) -> bool:
        """Whether launches go through ``xmp.spawn`` here (see :func:`detect_xla`)."""
        return detect_xla().usable

    def device_count(self) -> int:
        """Replicas ``xmp.spawn`` would start, read from the environment (0 if no XLA device)."""
        found = detect_xla()
        return found.replicas if found.usable else 0

    def kernel_hazard(self, start_method: str) -> Finding | None:
        """An XLA runtime started in the kernel makes xmp.spawn refuse every launch."""
        if start_method != "xla" or "torch_xla" not in sys.modules or not xla_initialized():
            return None
        return Finding(
            what="The XLA runtime has already been started in this kernel.",
            why=(
                "xmp.spawn refuses to start replicas once the parent has used an XLA device, and "
                "every later launch fails the same way until the kernel restarts. Something in "
                "an earlier cell touched the device: torch_xla.device(), xm.xla_device(), a "
                "tensor moved to it, or torch_xla.runtime queries such as world_size()."
            ),
            fix=(
                "restart the kernel and keep every XLA device use inside the launched function "
                "(importing torch_xla in the notebook is fine)."
            ),
        )

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

    def communicator(self, state: Any) -> Communicator:
        return XlaCommunicator(state)

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


class XlaCommunicator(Communicator):
    """Collectives of XLA replicas through torch_xla: ``xm.all_gather``, ``xm.all_reduce``,
    ``xm.rendezvous``. Tensors travel on the replica's XLA device and come back where they were.
    """

    def __init__(self, state: Any) -> None:
        import torch_xla.core.xla_model as xm

        self._state = state
        self._backend = state.device_backend
        self._group = None  # XLA's collectives go through no process group
        self._xm = xm
        self.device = state.device
        self.rank = state.process_index
        self.world_size = state.num_processes if state.use_distributed else 1
        self.control_device = self.device
        self._calls = 0

    def all_gather_into(self, output: torch.Tensor, tensor: torch.Tensor) -> None:
        gathered = self._xm.all_gather(tensor.to(self.device), dim=0)
        output.copy_(gathered.reshape(output.shape).to(output.device))

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        work = tensor.to(self.device)
        self._xm.all_reduce(self._xm.REDUCE_SUM, [work])  # a list is reduced in place
        if work is not tensor:
            tensor.copy_(work.to(tensor.device))

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        # A sum in which every replica but ``src`` contributes zeros.
        work = tensor.to(self.device, copy=True)
        if self.rank != src:
            work.zero_()
        self._xm.all_reduce(self._xm.REDUCE_SUM, [work])
        tensor.copy_(work.to(tensor.device))

    def all_gather_object(self, obj: Any) -> list[Any]:
        self._calls += 1
        tag = f"notebook_launcher.objects.{self._calls}"
        return [pickle.loads(p) for p in self._xm.rendezvous(tag, pickle.dumps(obj))]

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        objects[:] = self.all_gather_object(list(objects))[src]
