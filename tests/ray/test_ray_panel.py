"""The config panel launching on a real local multi-node Ray cluster: the form's cluster fields,
the Launch button, and the run's panels with a node column, as for a run on this machine."""

from __future__ import annotations

import os
import sys

import cloudpickle
from helpers.lanes import panel_run
from helpers.raycluster import START

from notebook_launcher import LaunchPanel, RayCluster, log

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def where_am_i(steps: int):
    import ray

    for step in range(steps):
        log({"loss": 1.0 / (step + 1)}, step=step)
    return {"rank": int(os.environ["RANK"]), "node": ray.get_runtime_context().get_node_id()}


def test_the_panel_launches_on_the_cluster_and_its_ranks_span_both_nodes(cluster):
    # Opened on a cluster for its timeout (kept by the form); the rest is set in the form.
    given = RayCluster(timeout=START)
    panel = LaunchPanel(where_am_i, args=(3,), num_processes=2, max_processes=2, cluster=given)
    panel.where.value = "Ray cluster"
    panel.num_processes.value = 4
    panel.address.value = cluster.address
    panel.cpus.value = 1
    panel.custom_resources.value = "slot=1"  # 2 per node: the ranks fill both nodes
    assert panel.settings().cluster == RayCluster(
        address=cluster.address, resources_per_process={"CPU": 1, "slot": 1}, timeout=START
    )
    assert f"Ray cluster (address {cluster.address}), 4 ranks × {{CPU: 1, slot: 1}}" in (
        panel.plan.value
    )
    handle, values = panel_run(panel, START + 60)
    assert [value["rank"] for value in values] == [0, 1, 2, 3]
    nodes = [value["node"] for value in values]
    assert len(set(nodes)) == 2 and nodes[0] == nodes[1] and nodes[2] == nodes[3]
    ranks = handle.model.ranks
    assert all(state.node for state in ranks) and len({state.node for state in ranks}) == 2
    assert ">node<" in handle.view.status.value  # the status table's node column
