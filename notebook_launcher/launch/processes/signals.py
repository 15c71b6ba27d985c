"""Keeping an interrupt from cutting the kernel's bookkeeping in half."""

from __future__ import annotations

import contextlib
import ctypes
import os
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
    """Set by SIGINT while :func:`interrupts_noted` is active (read with :meth:`is_set`).

    ``wake_fd``, where there is one, becomes readable when the flag is set, so that a loop
    waiting on descriptors wakes at once instead of at the end of its wait (a signal whose
    handler does not raise lets ``poll`` go on waiting)."""

    def __init__(self, wake: bool = False) -> None:
        self._set = False
        self._pipe = os.pipe() if wake else None
        if self._pipe is not None:
            for fd in self._pipe:
                os.set_blocking(fd, False)

    @property
    def wake_fd(self) -> int | None:
        return None if self._pipe is None else self._pipe[0]

    def set(self, *_: object) -> None:
        self._set = True
        if self._pipe is not None:
            with contextlib.suppress(OSError):  # full: it is readable already
                os.write(self._pipe[1], b"\0")

    def is_set(self) -> bool:
        return self._set

    def close(self) -> None:
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None


@contextlib.contextmanager
def interrupts_noted():
    """Turn a Ctrl-C/kernel interrupt into a flag for the duration, so that it is acted on at a
    safe point (never in the middle of reading a pipe whose stream must stay whole), and put the
    previous handler back. Outside the main thread the flag is never set."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)  # None: installed from C, left alone
    if previous is None:
        yield InterruptFlag()
        return
    flag = InterruptFlag(wake=True)
    signal.signal(signal.SIGINT, flag.set)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
        flag.close()


def raise_in_thread(thread_id: int, error: type[BaseException]) -> bool:
    """Have the thread ``thread_id`` raise ``error`` at its next Python instruction (a cell
    blocked in the kernel's ``input()``, which polls its socket in Python, raises it within
    a few milliseconds); whether the thread exists. :func:`cancel_raise` takes it back while
    it is still pending."""
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(error)
    )
    return bool(done)


def cancel_raise(thread_id: int) -> None:
    """Take back what :func:`raise_in_thread` asked ``thread_id`` to raise, if it has not yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
