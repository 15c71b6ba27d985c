"""What every launcher of ranks on other machines shares (Ray, Slurm): chosen with ``cluster=``,
the function shipped by value, the plan kept for its cluster's settings; and each rank's spec as
its own node sees it."""

from __future__ import annotations

import dataclasses
import threading
import time
from abc import ABC, abstractmethod

from ....protocol.spec import WorkerSpec
from ...planning.plan import LaunchPlan
from ..base import Launcher


class RemoteLauncher(Launcher):
    """Starts the ranks of ``plan`` on the machines of ``plan.cluster``."""

    selectable = False  # chosen with cluster=, not start_method=
    ships_by_value = True

    def __init__(self, plan: LaunchPlan | None = None) -> None:
        self.plan = plan

    @classmethod
    def for_plan(cls, plan: LaunchPlan) -> Launcher:
        return cls(plan)


def on_its_node(
    spec: WorkerSpec, local_rank: int, local_world_size: int, node_rank: int, num_nodes: int
) -> WorkerSpec:
    """``spec`` as the rank's node sees it: its place among the node's ranks, and results that
    travel over its socket (not this machine's shared memory)."""
    context = dataclasses.replace(
        spec.context,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        num_nodes=num_nodes,
        shared_memory=False,
    )
    return dataclasses.replace(spec, context=context, parent_pid=None)


class RemoteAttempt(ABC):
    """What every remote launcher's attempt shares: its handles, and being released once, when
    the last of them is closed (or at once, by whoever gives up on it first)."""

    def __init__(self) -> None:
        self.send_lock = threading.Lock()
        self.handles: list = []
        self._closed: set[int] = set()
        self._released = False
        self._lock = threading.Lock()

    def closed(self, handle) -> None:
        """``handle``'s rank is over, as its worker group sees it; the last one releases all."""
        with self._lock:
            self._closed.add(handle.rank)
            done = len(self._closed) == len(self.handles)
        if done:
            self.release()

    def node_heard(self, handle, body: bytes) -> None:
        """What ``handle``'s rank said its node has, before it loads the function (a rank
        started by a scheduler says it; a Ray actor answers its own check instead)."""

    def supervised_from_now(self) -> None:
        """Every rank has joined: its quiet time counts from now, not from the start."""
        started = time.monotonic()
        for handle in self.handles:
            handle.last_alive = started

    def release(self) -> None:
        """Release what the attempt holds on the cluster, once, whoever asks first."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._release()

    @abstractmethod
    def _release(self) -> None:
        """What :meth:`release` does, the first time."""
