"""Imports every forked worker would otherwise pay for, done once in the kernel, early.

Building an optimizer pulls in ``torch._dynamo`` (about a second, more on a busy machine); done in
the kernel before forking, no worker pays it. In a Jupyter kernel these imports start in a
background thread right after ``import notebook_launcher``, after ``ipywidgets``, which the first
launch's panel needs (0.05-0.45 s: most of what a first launch paid more), and the janitor (see
:mod:`.janitor`) is started, so a launch made a few seconds later pays nothing. No fork may happen
while that thread holds an import lock (the child would inherit a lock nobody releases), so every
fork of this process first waits for it: the launcher joins it, and a fork hook does for anyone
else's fork (a DataLoader's workers, say).
``NOTEBOOK_LAUNCHER_WARMUP=0`` turns the background start off.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading

from ...protocol.names import WORKER_ENTRY
from . import janitor

logger = logging.getLogger(__name__)

WARM_IMPORTS = ("torch._dynamo", WORKER_ENTRY.partition(":")[0])
# Imported first, and only in a kernel: what the first launch's live panel needs.
KERNEL_IMPORTS = ("ipywidgets",)
JOIN_LIMIT = 120.0  # seconds; the imports take a few

_thread: threading.Thread | None = None
_lock = threading.Lock()


def _import_all(names: tuple[str, ...] = WARM_IMPORTS) -> None:
    for name in names:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # an optional speed-up, never a reason to fail
                logger.debug("warm-up import of %s failed", name, exc_info=True)


def _warm_kernel() -> None:
    _import_all(KERNEL_IMPORTS)
    try:
        janitor.start()
    except Exception:  # the first launch starts it otherwise
        logger.debug("the janitor did not start early", exc_info=True)
    _import_all(WARM_IMPORTS)


def in_interactive_kernel() -> bool:
    """Whether this process is a Jupyter kernel (not a script, a test run or a worker)."""
    ipython = sys.modules.get("IPython")
    if "ipykernel" not in sys.modules or ipython is None:
        return False
    return ipython.get_ipython() is not None


def start_in_background() -> bool:
    """Start the imports in a daemon thread unless done, started or turned off; say if started."""
    global _thread
    if os.environ.get("NOTEBOOK_LAUNCHER_WARMUP", "1").strip() == "0":
        return False
    with _lock:
        if _thread is not None or all(
            name in sys.modules for name in KERNEL_IMPORTS + WARM_IMPORTS
        ):
            return False
        _thread = threading.Thread(
            target=_warm_kernel, name="notebook_launcher-warmup", daemon=True
        )
        _thread.start()
    return True


def _wait_for_thread() -> None:
    thread = _thread
    if thread is None or not thread.is_alive() or thread is threading.current_thread():
        return
    thread.join(JOIN_LIMIT)
    if thread.is_alive():
        logger.warning("the warm-up imports took over %.0f s; forking anyway", JOIN_LIMIT)


def finish() -> None:
    """Make sure the imports are done: wait for the background thread, or do them here."""
    _wait_for_thread()
    _import_all()


os.register_at_fork(before=_wait_for_thread)
