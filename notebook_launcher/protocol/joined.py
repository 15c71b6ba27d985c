"""Which ranks of a launch are through the process group's set-up, as the job's store records it.

A rank whose group was created by the package's state (``PartialState``, ``Accelerator``) marks
itself in the rendezvous store once ``init_process_group`` has returned: its connections to every
peer are then made. A rank that is done with its function leaves without waiting for the others
once every rank has marked itself (see ``worker/exit_barrier.py``): nobody is still connecting,
so its exit cuts no peer's set-up short. A rank whose group came from elsewhere (user code
calling ``init_process_group`` itself) is never marked, and the others wait for it as before.
"""

from __future__ import annotations

import os
from typing import Any

KEY_PREFIX = "notebook_launcher/joined"
# gloo may defer connecting its peers to the first collective: then set-up is not over at init.
LAZY_INIT = "TORCH_GLOO_LAZY_INIT"


def key(restart_count: int) -> str:
    return f"{KEY_PREFIX}/{restart_count}"


def connects_at_init() -> bool:
    """Whether gloo connects every peer while the group is created (its default)."""
    return os.environ.get(LAZY_INIT, "0").strip().lower() in ("", "0", "false", "no", "off")


def mark(store: Any, restart_count: int) -> None:
    """Count this rank as through the group's set-up in attempt ``restart_count``."""
    store.add(key(restart_count), 1)


def everyone(store: Any, restart_count: int, world_size: int) -> bool:
    """Whether every rank of attempt ``restart_count`` is through the group's set-up."""
    return store.add(key(restart_count), 0) >= world_size
