"""The rendezvous of a single-node launch, and what every attempt offers the supervisor."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from .store import KernelStore

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..planning.plan import LaunchPlan


class Attempt:
    """One attempt of a launch as this node sees it: where the workers meet, and the hooks a
    multi-node launch uses to start and stop together with the other nodes.

    Attributes:
        plan: the plan of this attempt (in a c10d launch the rendezvous assigns ``node_rank``).
        port: the port of the store the workers connect to.
    """

    def __init__(self, plan: LaunchPlan, port: int) -> None:
        self.plan = plan
        self.port = port

    def watch(self) -> BaseException | None:
        """Checked by the supervisor on every turn: an exception to stop this node with, or None."""
        return None

    def finish(self, deadline: float | None) -> None:
        """This node's ranks all returned: wait until the other nodes' ranks have too."""

    def workers_started(self) -> None:
        """Every local worker process exists now (called once per attempt)."""


class LocalAttempt(Attempt):
    """A single-node attempt, whose store starts serving once every worker is forked."""

    def __init__(self, plan: LaunchPlan, store: KernelStore) -> None:
        super().__init__(plan, store.port)
        self._store = store

    def workers_started(self) -> None:
        self._store.serve()


class Rendezvous(Protocol):
    """Where the workers of a launch meet, attempt after attempt: what the runner and a session
    ask of each kind of rendezvous."""

    def attempt(self, restart: int) -> AbstractContextManager[Attempt]:
        """Attempt ``restart``: entered before its workers start, left once they all ended (a
        multi-node rendezvous tells the other nodes when it is left by an error)."""
        ...

    def close(self) -> None:
        """Release what outlives the attempts (a multi-node launch's store)."""
        ...


class LocalRendezvous:
    """The rendezvous of a single-node launch: a fresh kernel-hosted store for each attempt."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan

    @contextlib.contextmanager
    def attempt(self, restart: int) -> Iterator[Attempt]:
        """Open the store for attempt ``restart``; it stops listening when the attempt ends."""
        plan = self.plan
        store = KernelStore(plan.master_addr, plan.requested_port, plan.exact_port, serve=False)
        try:
            yield LocalAttempt(plan, store)
        finally:
            store.close()

    def close(self) -> None:
        """Nothing outlives an attempt on one node."""


class ClusterRendezvous:
    """The rendezvous of a launch on a cluster: nothing in the kernel (rank 0's actor hosts the
    job's store, on its own node)."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan

    @contextlib.contextmanager
    def attempt(self, restart: int) -> Iterator[Attempt]:
        yield Attempt(self.plan, 0)

    def close(self) -> None:
        """Nothing to release."""
