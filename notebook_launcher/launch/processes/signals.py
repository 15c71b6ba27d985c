"""Keeping an interrupt from cutting the kernel's bookkeeping in half."""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a Ctrl-C/kernel interrupt until teardown is done, then deliver it.

    The previous SIGINT handler is always put back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # installed from C: leave it alone
        yield
        return
    pending: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending and callable(previous):
            previous(signal.SIGINT, None)


class InterruptFlag:
    """Set by SIGINT while :func:`interrupts_noted` is active (read with :meth:`is_set`)."""

    def __init__(self) -> None:
        self._set = False

    def set(self, *_: object) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@contextlib.contextmanager
def interrupts_noted():
    """Turn a Ctrl-C/kernel interrupt into a flag for the duration, so that it is acted on at a
    safe point (never in the middle of reading a pipe whose stream must stay whole), and put the
    previous handler back. Outside the main thread the flag is never set."""
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # installed from C: leave it alone
        yield flag
        return
    signal.signal(signal.SIGINT, flag.set)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
