"""What every launcher of ranks on other machines shares (Ray, Slurm): chosen with ``cluster=``,
the function shipped by value, the plan kept for its cluster's settings; and each rank's spec as
its own node sees it."""

from __future__ import annotations

import dataclasses
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

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
    """What every remote launcher's attempt shares: how it starts (its ranks started, then
    awaited), its handles, and being released once, when the last of them is closed (or at
    once, by whoever gives up on it first)."""

    def __init__(self) -> None:
        self.send_lock = threading.Lock()
        self.handles: list = []
        self._closed: set[int] = set()
        self._released = False
        self._lock = threading.Lock()

    def start(self, specs: list[WorkerSpec], payload: Any) -> list:
        """Start a rank per spec (:meth:`_start_ranks`), wait until every one joined
        (:meth:`_await_ranks`) and supervise them from then on: the ranks' handles. On any
        error, an interrupt included, everything the attempt holds is released first."""
        try:
            self._start_ranks(specs, payload)
            self._await_ranks()
            self.supervised_from_now()
        except BaseException:
            self.release()
            raise
        return list(self.handles)

    @abstractmethod
    def _start_ranks(self, specs: list[WorkerSpec], payload: Any) -> None:
        """Start a rank per spec running ``payload``, its handle in :attr:`handles`, without
        waiting for them."""

    @abstractmethod
    def _await_ranks(self) -> None:
        """Wait until every rank joined (a rank that ended meanwhile is the supervisor's to
        report); a :class:`ClusterError` if they cannot."""

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
