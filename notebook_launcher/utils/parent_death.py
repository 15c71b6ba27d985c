"""Tying a child process's life to its parent's (workers, the XLA helper, the store server)."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def _load_libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


# Loaded once where this module is imported (the kernel), so forked children do not each load it.
_LIBC = _load_libc()


def die_with_parent(parent_pid: int) -> None:
    """Leave the parent's process group and make sure the parent's death kills this process.

    Called first thing in a child the kernel started. Its own process group keeps an interrupt
    aimed at the kernel's group from hitting it; ``PR_SET_PDEATHSIG`` (Linux) kills it with the
    kernel. A child whose parent died before that took effect exits at once.
    """
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    try:
        (_LIBC or _load_libc()).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)
