"""One launch at a time per kernel.

A launch forks its workers from the kernel. While another launch of the same kernel runs, its
threads (the background supervisor, a foreground launch's start-up) may hold a lock at that moment
(an import, a stream, an allocator), and a forked child inherits that lock held by a thread it
does not have: the new workers can hang forever (seen with a foreground launch forked while a
background launch was importing). So a second launch is refused at once, foreground or background,
with a :class:`LaunchBusyError` naming the one that runs.
"""

from __future__ import annotations

import threading
import time

from ..errors import LaunchBusyError

_lock = threading.Lock()
LAUNCH_ENDS = (
    "Wait for it (a background launch: handle.wait()) or stop it (handle.stop(), the Stop "
    "button or an interrupt) first."
)
_holder: tuple[str, float, str] | None = None  # what runs, since when (monotonic), how to end it


def claim(what: str, how_to_end: str = LAUNCH_ENDS) -> None:
    """Take the kernel for a launch (or session) described by ``what``; LaunchBusyError if one
    runs. ``how_to_end`` tells a later caller how to end this one."""
    global _holder
    if not _lock.acquire(blocking=False):
        running, since, ending = _holder or ("a launch", time.monotonic(), LAUNCH_ENDS)
        raise LaunchBusyError(
            f"{running} is already running in this kernel (for {time.monotonic() - since:.0f} "
            f"s): one launch or session at a time. {ending} Starting workers while others "
            "run could fork the new ones while the other launch's thread holds a lock, which "
            "can hang them."
        )
    _holder = (what, time.monotonic(), how_to_end)


def release() -> None:
    """Give the kernel back (the launch that claimed it ended)."""
    global _holder
    _holder = None
    _lock.release()


def describe(kind: str, function: object, num_processes: int) -> str:
    name = getattr(function, "__qualname__", None) or type(function).__name__
    return f"a {kind} launch of {name} ({num_processes} processes)"
