"""State of the torch_xla TEST DOUBLE: the runtime flag, each replica's ordinals, its gloo group."""

from __future__ import annotations

import datetime
import os
import threading
from dataclasses import dataclass
from typing import Any

STORE_ENV = "FAKE_XLA_STORE"  # host:port of the spawning process's TCPStore
_runtime_started = False
_local = threading.local()
# Every replica's group is also held here, not only in its thread's local storage: a process
# forked by one replica thread (a DataLoader worker) frees the other threads' locals, and a
# gloo group destroyed in a fork child waits forever for threads the child does not have.
_groups: list[Any] = []


@dataclass
class Replica:
    ordinal: int
    local_ordinal: int
    world_size: int
    here: int  # replicas (threads) in this process
    group: Any = None
    calls: int = 0


def initialize() -> None:
    global _runtime_started
    _runtime_started = True


def initialized() -> bool:
    return _runtime_started


def replica() -> Replica:
    """The calling replica; outside xmp.spawn the process is the only one."""
    initialize()
    current = getattr(_local, "replica", None)
    if current is None:
        current = _local.replica = Replica(0, 0, 1, 1)
    return current


def enter(ordinal: int, local_ordinal: int, world_size: int, here: int) -> None:
    _local.replica = Replica(ordinal, local_ordinal, world_size, here)


def group() -> Any:
    """This replica's gloo group over every replica, made on first use."""
    import torch.distributed as dist

    me = replica()
    if me.group is None:
        host, port = os.environ[STORE_ENV].rsplit(":", 1)
        store = dist.TCPStore(host, int(port), is_master=False)
        me.group = dist.ProcessGroupGloo(
            dist.PrefixStore("fake_torch_xla", store),
            me.ordinal,
            me.world_size,
            datetime.timedelta(seconds=120),
        )
        _groups.append(me.group)
    return me.group
