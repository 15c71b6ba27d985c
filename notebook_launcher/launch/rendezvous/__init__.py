"""Where the workers of a launch meet: a kernel-hosted store on one node; on several nodes, a
rendezvous shared with the other nodes' kernels (``static``: node 0 hosts the store; ``c10d``:
torch's dynamic rendezvous), which also starts and stops the nodes together."""

from __future__ import annotations

from collections.abc import Callable

from ..planning.plan import LaunchPlan
from .c10d import C10dNodes
from .local import Attempt, ClusterRendezvous, LocalRendezvous, Rendezvous
from .static import StaticNodes

__all__ = ["Attempt", "Rendezvous", "open_rendezvous"]


def open_rendezvous(plan: LaunchPlan, notice: Callable[[str], None]) -> Rendezvous:
    """The rendezvous for ``plan``: local on one node, shared with the other nodes otherwise.

    Args:
        plan: the validated :class:`LaunchPlan`.
        notice: called with each line the launcher has to say in the cell (waiting, restarts).
    """
    if plan.cluster is not None:
        return ClusterRendezvous(plan)  # the ranks meet at a store rank 0's actor hosts
    if not plan.multi_node:
        return LocalRendezvous(plan)
    if plan.rdzv_backend == "c10d":
        return C10dNodes(plan, notice)
    return StaticNodes(plan, notice)
