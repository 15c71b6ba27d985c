"""OpenMP's thread pool and fork.

GNU OpenMP (libgomp, which the PyTorch wheels for Linux use for intra-op parallelism) keeps a pool
of worker threads per thread that ran a parallel region, and has no fork handler. A process forked
from a thread that owns such a pool inherits the pool's bookkeeping but none of its threads: its
first parallel region with more than one thread waits forever for threads that do not exist. In a
notebook that is the common case: any large tensor operation in a cell starts the pool, and a
worker forked afterwards with ``threads_per_process > 1`` hangs at its first large operation.

:func:`release_thread_pools` asks every OpenMP runtime loaded in this process to stop the calling
thread's pool (``omp_pause_resource_all``, OpenMP 5.0: the threads are joined, a few milliseconds);
the next parallel region in the kernel starts a new pool, and a child forked in between starts its
own. Nothing is loaded that is not already in the process (``RTLD_NOLOAD``).
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any

from .cuda_fork import mapped_libraries

_RUNTIME = re.compile(r"/lib(gomp|iomp5|omp)[^/]*\.so[^/]*$")
OMP_PAUSE_HARD = 2  # omp_pause_hard: release every resource, threads included


def openmp_runtimes(libraries: list[str] | None = None) -> list[str]:
    """Paths of the OpenMP runtimes mapped into this process."""
    if libraries is None:
        libraries = mapped_libraries()
    return [path for path in libraries if _RUNTIME.search(path)]


_pauses: list[tuple[str, Any]] = []  # (path, omp_pause_resource_all) once found


def _pause_functions() -> list[tuple[str, Any]]:
    """``omp_pause_resource_all`` of each loaded runtime that has it (looked up once found)."""
    if _pauses:
        return _pauses
    for path in openmp_runtimes():
        try:
            runtime = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            pause = runtime.omp_pause_resource_all
        except (OSError, AttributeError):  # gone, or a runtime older than OpenMP 5.0
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        _pauses.append((path, pause))
    return _pauses


def release_thread_pools() -> list[str]:
    """Stop the calling thread's OpenMP thread pool in every loaded runtime that can; returns the
    runtimes that did. Call it right before forking from a thread that may have run OpenMP."""
    return [path for path, pause in _pause_functions() if pause(OMP_PAUSE_HARD) == 0]
