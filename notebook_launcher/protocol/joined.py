"""The keys of the job's store that let a rank that is done leave: the ranks counted through the
process group's set-up, and through their function.

A rank that is done waits, before it exits, until every rank may leave (see
``worker/exit_barrier.py``): a peer still setting the group up would otherwise fail on the closed
connection. Every rank may leave once each is done (the last one done sets :func:`leave_key`), or
as soon as each rank's gloo group is connected to all its peers: a rank whose group the package's
state (``PartialState``, ``Accelerator``) created counts itself once ``init_process_group`` has
returned, and the last of them sets the same key. From then on a rank that is done leaves at
once, as a plain process would. A rank whose group came from elsewhere (user code calling
``init_process_group`` itself) is never counted, and the others wait for every rank to be done.
"""

from __future__ import annotations

import os
from typing import Any

KEY_PREFIX = "notebook_launcher/exit"
# gloo may defer connecting its peers to the first collective: then set-up is not over at init.
LAZY_INIT = "TORCH_GLOO_LAZY_INIT"


def leave_key(restart_count: int) -> str:
    """Set once every rank of attempt ``restart_count`` may leave."""
    return f"{KEY_PREFIX}/{restart_count}/all"


def done_key(restart_count: int) -> str:
    """The count of the ranks whose function ended."""
    return f"{KEY_PREFIX}/{restart_count}/count"


def connected_key(restart_count: int) -> str:
    """The count of the ranks whose group is connected to all its peers."""
    return f"{KEY_PREFIX}/{restart_count}/connected"


def connects_at_init() -> bool:
    """Whether gloo connects every peer while the group is created (its default)."""
    return os.environ.get(LAZY_INIT, "0").strip().lower() in ("", "0", "false", "no", "off")


def count(store: Any, key: str, restart_count: int, world_size: int) -> None:
    """Count this rank in ``key``; the last rank counted lets every rank leave."""
    if store.add(key, 1) >= world_size:
        store.set(leave_key(restart_count), "1")
