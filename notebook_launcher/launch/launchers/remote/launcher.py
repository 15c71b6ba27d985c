"""What every launcher of ranks on other machines shares (Ray, Slurm): chosen with ``cluster=``,
the function shipped by value, the plan kept for its cluster's settings; and each rank's spec as
its own node sees it."""

from __future__ import annotations

import dataclasses

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
