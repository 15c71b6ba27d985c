"""The exit barrier: a rank that is done waits for every rank of the job before it tears down.

Destroying the default process group closes this rank's connections to its peers. A peer that
is still setting the group up (gloo connecting its full mesh, slower on a busy machine) then
fails with "Connection closed by peer", although nothing went wrong. So a rank that returned or
failed marks itself done in the job's store and waits until every rank has, as torch elastic
does, before the group is destroyed and the process ends.

No wait is needed once every rank's gloo group is connected to all its peers: each rank whose
group the package's state created counts itself so in the store, and the last of them lets every
rank leave (see ``protocol/joined.py``). A rank that is done then leaves at once, after one look
at the store, as a plain process would, instead of every rank waking together at the end (on a
machine with fewer cores than ranks, their exits then pile up).

The wait only ever delays the end of a rank that is finished: its result or failure has already
been sent to the kernel, which stops every rank as soon as one fails (a signal, which ends the
wait here), so the bound is only a backstop.

Otherwise each rank counts itself in the store; the last one lets every rank leave, which wakes
the others at once: each waits for that mark in a helper thread (the store's own blocking wait),
so that its main thread stays where the kernel's stop can end the wait (within
:data:`STOP_LOOK` seconds once the function has ended, when the stop signal no longer raises:
see :mod:`.stopping`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from ..protocol import joined
from . import stopping

logger = logging.getLogger(__name__)

TIMEOUT = 300.0  # seconds a done rank waits for the others at most (torch elastic's default)
STOP_LOOK = 0.1  # seconds between looks at whether the kernel asked a waiting rank to stop


def wait_for_all_ranks(restart_count: int) -> None:
    """Wait, at most :data:`TIMEOUT` seconds, until every rank of the default process group may
    leave in attempt ``restart_count`` (each is connected to all its peers, or each is done:
    this rank is counted done here); no group, no wait.

    Never raises: the kernel's stop signal (see :mod:`.stopping`), another signal
    (KeyboardInterrupt, SystemExit) or a store error (the kernel's store gone) ends the wait, and
    the process goes on to exit.
    """
    try:
        group = _default_group()
        if group is None:
            return
        store, rank, world_size = group
        leave_key = joined.leave_key(restart_count)
        if store.check([leave_key]):
            return  # every rank's group is connected (or every rank is done): leave at once
        joined.count(store, joined.done_key(restart_count), restart_count, world_size)
        _wait_until_done(store, leave_key)
    except (KeyboardInterrupt, SystemExit):
        pass  # stopped by the kernel while waiting: the result is in, exit without a traceback
    except Exception as exc:  # the store went away with the kernel (or the job ended)
        logger.debug("exit barrier ended early: %r", exc)


def _default_group() -> tuple[Any, int, int] | None:
    """``(store, rank, world size)`` of the default process group, if this process has one
    with other ranks in it."""
    dist = sys.modules.get("torch.distributed")  # never imported: the function made no group
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    world_size = dist.get_world_size()
    if world_size <= 1:
        return None
    store = dist.distributed_c10d._get_default_store()
    return store, dist.get_rank(), world_size


def _wait_until_done(store: Any, done_key: str) -> None:
    """Block until ``done_key`` is set (at most :data:`TIMEOUT`), the store's own wait running in
    a daemon thread: this thread waits on an event, which a signal's handler interrupts."""
    done = threading.Event()

    def wait() -> None:
        try:
            store.wait([done_key], timedelta(seconds=TIMEOUT))
        except Exception as exc:  # the kernel's store went away (or the bound passed)
            logger.debug("exit barrier: waiting for the other ranks ended: %r", exc)
        done.set()

    threading.Thread(target=wait, name="notebook_launcher-exit-barrier", daemon=True).start()
    deadline = time.monotonic() + TIMEOUT
    while not done.wait(STOP_LOOK):  # the job's end wakes this at once; a stop within a look
        if stopping.stop_requested():
            return
        if time.monotonic() >= deadline:
            logger.debug("exit barrier: not every rank was done after %g s", TIMEOUT)
            return
