"""Whether this process has initialised CUDA, asked without initialising anything, and who did it.

A process that called ``cuInit`` cannot fork children that use CUDA: they fail with "Cannot
re-initialize CUDA in forked subprocess" (torch's own check) or "CUDA error: initialization error"
(the driver's, when the context came from a library other than torch). Three sources are read:

* torch's flag (``torch.cuda.is_initialized()``);
* the driver itself, only when ``libcuda`` is already mapped into this process (read from
  ``/proc/self/maps``; nothing is loaded): it is opened with ``RTLD_NOLOAD`` and asked for the
  device count, which answers ``CUDA_ERROR_NOT_INITIALIZED`` until someone called ``cuInit``;
* the first stack through which torch initialised CUDA, recorded by a wrapper around
  ``torch.cuda._lazy_init`` installed when ``notebook_launcher`` is imported.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import traceback
from dataclasses import dataclass

from .cells import code_name

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3
_DRIVER = re.compile(r"/libcuda\.so(\.\d+)*$")
_DRIVER_NAME = b"/libcuda.so"

# Libraries that create CUDA contexts of their own, named by a fragment of their file name.
_CONTEXT_MAKERS = {
    "libcudart": "the CUDA runtime (libcudart), loaded by a library other than torch",
    "cupy": "CuPy",
    "bitsandbytes": "bitsandbytes",
    "libtensorflow": "TensorFlow",
    "xla_extension": "JAX (jaxlib)",
    "jaxlib": "JAX (jaxlib)",
    "numba": "Numba's CUDA support",
    "pycuda": "PyCUDA",
    "libcudf": "RAPIDS cuDF",
    "onnxruntime_providers_cuda": "ONNX Runtime's CUDA provider",
    "libnvrtc": "NVRTC (run-time compiled CUDA kernels)",
    "torchao": "torchao",
    "triton": "Triton",
}


@dataclass(frozen=True)
class CudaForkState:
    """What the probe found.

    Attributes:
        initialized: CUDA was initialised in this process (by torch or by the driver's own record).
        by_torch: torch's flag says so.
        by_driver: the loaded driver says so (``None``: no driver is loaded, so it cannot be).
        culprit: the first stack through which torch initialised CUDA ("Cell In[3], line 2 ..."),
            when it was recorded.
        likely_sources: loaded libraries that make CUDA contexts of their own (for a context made
            outside torch).
    """

    initialized: bool
    by_torch: bool
    by_driver: bool | None
    culprit: str | None
    likely_sources: tuple[str, ...]


def mapped_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the files mapped into this process, in order of first appearance."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    seen: dict[str, None] = {}
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            seen.setdefault(parts[5].removesuffix(" (deleted)"), None)
    return list(seen)


def _driver_mapped(maps: str) -> bool:
    """Whether a CUDA driver library may be mapped: its name appears in ``maps`` (True when
    the file cannot be read, so that the full probe decides)."""
    try:
        with open(maps, "rb") as handle:
            return _DRIVER_NAME in handle.read()
    except OSError:
        return True


def loaded_driver(libraries: list[str]) -> str | None:
    """The path of the CUDA driver library among ``libraries``, if it is loaded."""
    return next((path for path in libraries if _DRIVER.search(path)), None)


def driver_initialized(path: str) -> bool | None:
    """Ask an already loaded driver whether ``cuInit`` was called; ``None`` if it cannot tell.

    ``RTLD_NOLOAD`` returns a handle only to a library that is already in the process, so this
    never loads the driver; ``cuDeviceGetCount`` answers ``CUDA_ERROR_NOT_INITIALIZED`` before
    ``cuInit`` and changes nothing.
    """
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        query = lib.cuDeviceGetCount
    except (OSError, AttributeError):
        return None
    query.argtypes = [ctypes.POINTER(ctypes.c_int)]
    query.restype = ctypes.c_int
    count = ctypes.c_int(0)
    code = query(ctypes.byref(count))
    if code == CUDA_SUCCESS:
        return True
    if code == CUDA_ERROR_NOT_INITIALIZED:
        return False
    return None


def likely_sources(libraries: list[str]) -> tuple[str, ...]:
    """Names of loaded libraries known to create CUDA contexts without torch."""
    found: dict[str, None] = {}
    for path in libraries:
        name = os.path.basename(path)
        for fragment, label in _CONTEXT_MAKERS.items():
            if fragment in name or f"/{fragment}/" in path:
                found.setdefault(label, None)
    return tuple(found)


def probe(maps: str = "/proc/self/maps") -> CudaForkState:
    """Whether CUDA is initialised in this process, from torch, the driver and the recorded stack."""
    torch = sys.modules.get("torch")
    by_torch = bool(torch is not None and torch.cuda.is_initialized())
    if not by_torch and not _driver_mapped(maps):  # the usual case, in one pass over the text
        return CudaForkState(False, False, None, None, ())
    libraries = mapped_libraries(maps)
    driver = loaded_driver(libraries)
    by_driver = driver_initialized(driver) if driver else None
    initialized = by_torch or bool(by_driver)
    return CudaForkState(
        initialized=initialized,
        by_torch=by_torch,
        by_driver=by_driver,
        culprit=_recorder.culprit if initialized else None,
        likely_sources=likely_sources(libraries) if initialized and not by_torch else (),
    )


class _CulpritRecorder:
    """Wraps a ``_lazy_init`` so that the first call that leaves CUDA initialised is remembered."""

    def __init__(self) -> None:
        self.culprit: str | None = None
        self._lock = threading.Lock()

    def wrap(self, original, is_initialized):
        recorder = self

        def _lazy_init(*args, **kwargs):
            if recorder.culprit is not None or is_initialized():
                return original(*args, **kwargs)
            stack = traceback.extract_stack()[:-1]
            result = original(*args, **kwargs)
            if is_initialized():
                with recorder._lock:
                    if recorder.culprit is None:
                        recorder.culprit = describe_stack(stack)
            return result

        _lazy_init.__wrapped__ = original
        _lazy_init._notebook_launcher_recorder = True
        return _lazy_init


_recorder = _CulpritRecorder()


def install_culprit_recorder(cuda_module=None) -> bool:
    """Wrap ``torch.cuda._lazy_init`` (and the copies its submodules imported) once.

    Returns whether a wrapper is in place. Does nothing once CUDA is initialised: the culprit has
    already gone by.
    """
    if cuda_module is None:
        import torch.cuda as cuda_module
    current = getattr(cuda_module, "_lazy_init", None)
    if current is None:
        return False
    if getattr(current, "_notebook_launcher_recorder", False):
        return True
    if cuda_module.is_initialized():
        return False
    wrapped = _recorder.wrap(current, cuda_module.is_initialized)
    cuda_module._lazy_init = wrapped
    prefix = getattr(cuda_module, "__name__", "") + "."
    for name, module in list(sys.modules.items()):
        if name.startswith(prefix) and getattr(module, "_lazy_init", None) is current:
            module._lazy_init = wrapped
    return True


def describe_stack(stack: traceback.StackSummary) -> str:
    """The user's frames of ``stack``, innermost last, with notebook cells named as IPython does."""
    frames = [f for f in stack if not _is_library(f.filename) or f is stack[-1]] or list(stack[-1:])
    return "\n".join(
        f"  {code_name(f.filename)}, line {f.lineno}, in {f.name}"
        + (f"\n    {f.line.strip()}" if f.line else "")
        for f in frames[-6:]
    )


def _is_library(filename: str) -> bool:
    return (
        "site-packages" in filename
        or "dist-packages" in filename
        or filename.startswith("<frozen")
        or os.path.dirname(filename) == os.path.dirname(os.__file__)
    )


def fork_finding_text(state: CudaForkState) -> tuple[str, str]:
    """The 'what' and 'why' of a pre-flight finding for ``state`` (which must be initialised)."""
    if state.by_torch:
        what = "CUDA has already been initialised in this kernel (by torch)."
        if state.culprit:
            what += " The first call that did it:\n" + state.culprit
    else:
        what = (
            "CUDA has already been initialised in this kernel, outside torch (the driver says so)."
        )
        if state.likely_sources:
            what += " Loaded libraries that create CUDA contexts: " + ", ".join(
                state.likely_sources
            )
            what += "."
    why = (
        "forked workers cannot use CUDA once the parent has ('Cannot re-initialize CUDA in forked "
        "subprocess' or 'CUDA error: initialization error')."
    )
    return what, why
