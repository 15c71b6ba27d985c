"""Killing a worker and everything it started, with bounded waits."""

from __future__ import annotations

import os
import signal

import psutil


def kill_tree(pid: int | None) -> None:
    """SIGKILL a worker, its process group and every descendant. Never raises."""
    if pid is None:
        return
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        # The worker leads its own group (see the worker bootstrap); the group outlives the
        # worker, so this also reaches what it left running after it exited.
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for target in [pid, *(child.pid for child in descendants)]:
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
