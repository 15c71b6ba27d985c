"""How a worker is stopped: a catchable signal first, so the user's clean-up code runs.

The kernel stops a rank (another rank failed, a timeout or a stall, an interrupt, a stop request)
with SIGTERM, and kills it only after a short grace. Here SIGTERM becomes :class:`RankStopped`, a
``KeyboardInterrupt`` raised in the main thread: ``finally`` blocks, ``with`` exits and ``except
KeyboardInterrupt`` handlers (a save-on-interrupt) run, then the process exits and runs its
``atexit`` handlers.

Once the user's function has ended (:func:`leaving`), a stop raises nothing: the rank only
reports its outcome and leaves (the exit barrier ends its wait, see :func:`stop_requested`). A
``KeyboardInterrupt`` raised there would cut the leaving short and print a traceback into the
cell; a rank that failed because its peer did is often in that state when the kernel stops it
(tearing its process group down, which takes a while on a busy machine).
"""

from __future__ import annotations

import atexit
import signal
from typing import Any

from ..protocol.names import STOP_SIGNAL


class RankStopped(KeyboardInterrupt):
    """The stop signal reached this rank (raised in its main thread). The kernel knows whether
    it sent it; a SIGTERM from elsewhere (a node shutting down, ``kill``) reads the same here."""


_leaving = False  # the user's function has ended: a stop no longer raises
_requested = False  # the stop signal arrived


def _stop(signum: int, frame: Any) -> None:
    global _requested
    # Once: a second signal must not break the clean-up the first one started.
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)
    _requested = True
    if not _leaving:
        raise RankStopped("this rank got the stop signal (SIGTERM)")


def stop_on_signal() -> None:
    """Turn the stop signal into :class:`RankStopped` in this process's main thread."""
    signal.signal(STOP_SIGNAL, _stop)


def leaving() -> None:
    """The user's function has ended: from now on the stop signal raises nothing."""
    global _leaving
    _leaving = True


def stop_requested() -> bool:
    """Whether the kernel asked this rank to stop."""
    return _requested


def forget_inherited_exit_handlers() -> None:
    """Drop the ``atexit`` handlers a forked worker inherited from the kernel (they belong to
    the kernel, whose sockets and files they would close), keeping the ones the worker adds."""
    atexit._clear()


def run_exit_handlers() -> None:
    """Run the ``atexit`` handlers the user's code registered in this forked worker.

    A forked multiprocessing child ends with ``os._exit``, which skips them; a spawned one
    exits normally, so it must not call this (they would run twice).
    """
    atexit._run_exitfuncs()
