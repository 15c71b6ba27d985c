"""Killing a worker and everything it started, with bounded waits."""

from __future__ import annotations

import os
import signal

import psutil


def kill_tree(pid: int | None, descendants: bool = True) -> None:
    """SIGKILL a worker, its process group and every descendant. Never raises.

    ``descendants=False``: the worker has exited and was collected, so what it started is no
    longer its children (and its pid may be another process's by now): its process group only.
    """
    if pid is None:
        return
    found = []
    if descendants:
        try:
            found = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            pass
    try:
        # The worker leads its own group (see the worker bootstrap); the group outlives the
        # worker, so this also reaches what it left running after it exited.
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if not descendants:
        return
    for target in [pid, *(child.pid for child in found)]:
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
