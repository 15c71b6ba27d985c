"""Names both sides agree on: signals and entry points.

The kernel starts workers by the name of their entry point (as torchrun starts a script), so the
kernel's code never imports the worker's.
"""

from __future__ import annotations

import importlib
import logging
import signal
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

STACK_DUMP_SIGNAL = signal.SIGUSR1  # a worker writes every thread's Python stack to stderr
# The kernel's request to stop: a worker raises KeyboardInterrupt, so its clean-up code runs.
STOP_SIGNAL = signal.SIGTERM
STOPPED_TYPE = "notebook_launcher.worker.stopping.RankStopped"  # what a worker raises on it

# "module:function" of each process the kernel starts.
WORKER_ENTRY = "notebook_launcher.worker.bootstrap:run_worker"
SESSION_LOOP = "notebook_launcher.worker.session_loop:serve"  # what a session's workers run
XLA_HELPER_ENTRY = "notebook_launcher.worker.xla_replica:run_helper"
RAY_RANK_ACTOR = "notebook_launcher.worker.remote_rank:RankActor"  # each rank's actor on a cluster
WORKER_FUNCTION = WORKER_ENTRY.rpartition(":")[2]  # the bottom frame of every worker's stack

# Where a rank waits in a shared-memory collective (the kernel names that place in stall reports).
SHARED_MEMORY_SOURCE = "notebook_launcher/backends/shared_memory.py"


def entry_point(name: str) -> Callable[..., Any]:
    """The function a "module:function" name stands for (importing the module if needed)."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)
