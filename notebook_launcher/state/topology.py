"""Where this process sits in its job: read from the launcher, torchrun, or an existing group."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ..protocol.context import current_context


@dataclass(frozen=True)
class Topology:
    """This process's place in the job.

    ``launched`` is True when the process belongs to a job started by ``notebook_launcher`` or
    torchrun (the process group is then created from the environment), and ``group_exists``
    when a default process group was already created by the caller.
    """

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    launched: bool
    group_exists: bool = False
    source: str = "single process"


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ValueError(f"environment variable {name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not valid: expected an int")


def _from_ranks(rank: int, world: int, source: str, group_exists: bool = False) -> Topology:
    """A launched job's topology; the per-node numbers come from torchrun's variables."""
    return Topology(
        rank,
        _env_int("LOCAL_RANK", rank),
        world,
        _env_int("LOCAL_WORLD_SIZE", world),
        launched=True,
        group_exists=group_exists,
        source=source,
    )


def detect_topology() -> Topology:
    """Read this process's rank and world size, in order of trust.

    1. the typed context set by ``notebook_launcher``'s worker bootstrap;
    2. a default process group the caller already created (adopted as it is);
    3. the torchrun variables ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``;
    4. otherwise a single process.
    """
    context = current_context()
    dist = sys.modules.get("torch.distributed")
    group_exists = dist is not None and dist.is_available() and dist.is_initialized()
    if context is not None:
        return Topology(
            context.rank,
            context.local_rank,
            context.world_size,
            context.local_world_size,
            launched=True,
            group_exists=group_exists,  # the function may have created the group itself
            source="notebook_launcher",
        )
    if group_exists:
        return _from_ranks(dist.get_rank(), dist.get_world_size(), "existing process group", True)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _from_ranks(_env_int("RANK"), _env_int("WORLD_SIZE"), "torchrun environment")
    return Topology(0, 0, 1, 1, launched=False)
