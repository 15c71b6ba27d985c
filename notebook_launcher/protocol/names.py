"""Names both sides agree on: signals, entry points, and the files a worker may leave behind.

The kernel starts workers by the name of their entry point (as torchrun starts a script), so the
kernel's code never imports the worker's.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections.abc import Callable
from typing import Any

STACK_DUMP_SIGNAL = signal.SIGUSR1  # a worker writes every thread's Python stack to stderr

# "module:function" of each process the kernel starts.
WORKER_ENTRY = "notebook_launcher.worker.bootstrap:run_worker"
XLA_HELPER_ENTRY = "notebook_launcher.worker.xla_replica:run_helper"
WORKER_FUNCTION = WORKER_ENTRY.rpartition(":")[2]  # the bottom frame of every worker's stack

# Where a rank waits in a shared-memory collective (the kernel names that place in stall reports).
SHARED_MEMORY_SOURCE = "notebook_launcher/backends/shared_memory.py"

# Shared-memory exchange files: /dev/shm/notebook_launcher-<kernel pid>-<random>. The workers
# unlink them at once; the kernel removes those of ranks that died first.
SHARED_MEMORY_DIRECTORY = "/dev/shm"
SHARED_MEMORY_PREFIX = "notebook_launcher-"


def entry_point(name: str) -> Callable[..., Any]:
    """The function a "module:function" name stands for (importing the module if needed)."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def shared_memory_path(owner_pid: int, token: str) -> str:
    """The path of a new exchange file of the job whose kernel is process ``owner_pid``."""
    return os.path.join(SHARED_MEMORY_DIRECTORY, f"{SHARED_MEMORY_PREFIX}{owner_pid}-{token}")


def leftover_files(owner_pid: int) -> list[str]:
    """Paths of the exchange files created in a job launched by process ``owner_pid``."""
    start = f"{SHARED_MEMORY_PREFIX}{owner_pid}-"
    try:
        names = os.listdir(SHARED_MEMORY_DIRECTORY)
    except OSError:
        return []
    return [os.path.join(SHARED_MEMORY_DIRECTORY, n) for n in names if n.startswith(start)]


def remove(path: str) -> None:
    """Delete ``path`` if it is still there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_leftovers(owner_pid: int) -> None:
    """Delete the exchange files of jobs launched by ``owner_pid`` (after its workers ended)."""
    for path in leftover_files(owner_pid):
        remove(path)
