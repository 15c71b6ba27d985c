"""The exit barrier: a rank that is done waits for every rank of the job before it tears down.

Destroying the default process group closes this rank's connections to its peers. A peer that
is still setting the group up (gloo connecting its full mesh, slower on a busy machine) then
fails with "Connection closed by peer", although nothing went wrong. So a rank that returned or
failed marks itself done in the job's store and waits until every rank has, as torch elastic
does, before the group is destroyed and the process ends.

The wait only ever delays the end of a rank that is finished: its result or failure has already
been sent to the kernel, which stops every rank as soon as one fails (a signal, which ends the
wait here within a pause), so the bound is only a backstop.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from . import stopping

logger = logging.getLogger(__name__)

TIMEOUT = 300.0  # seconds a done rank waits for the others at most (torch elastic's default)
FIRST_PAUSE = 0.005  # seconds between the first looks at the store: peers often end together
LONGEST_PAUSE = 0.1  # short enough for a signal's Python handler to run promptly
KEY_PREFIX = "notebook_launcher/exit"


def wait_for_all_ranks(restart_count: int) -> None:
    """Mark this rank done for attempt ``restart_count`` and wait, at most :data:`TIMEOUT`
    seconds, until every rank of the default process group has; no group, no wait.

    Never raises: the kernel's stop signal (see :mod:`.stopping`), another signal
    (KeyboardInterrupt, SystemExit) or a store error (the kernel's store gone) ends the wait, and
    the process goes on to exit.
    """
    try:
        group = _default_group()
        if group is None:
            return
        store, rank, world_size = group
        _mark_done_and_wait(store, _keys(restart_count, world_size), rank)
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


def _keys(restart_count: int, world_size: int) -> list[str]:
    """One key per rank, named after the attempt: a restarted attempt shares the store with
    the keys of the attempts before it."""
    return [f"{KEY_PREFIX}/{restart_count}/{rank}" for rank in range(world_size)]


def _mark_done_and_wait(store: Any, keys: list[str], rank: int) -> None:
    store.set(keys[rank], "1")
    deadline = time.monotonic() + TIMEOUT
    pause = FIRST_PAUSE
    while not store.check(keys):
        if stopping.stop_requested():
            return
        if time.monotonic() >= deadline:
            logger.debug("exit barrier: not every rank was done after %g s", TIMEOUT)
            return
        # Sleeping in Python, not in a blocking store call, lets a signal's handler run.
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)
