"""The config panel launching on a real local two-node Slurm: the form's Slurm fields over the
SlurmCluster it was given, the Launch button, and the run's panels with a node column, as for a
run on this machine."""

from __future__ import annotations

import os
import sys

import cloudpickle
from helpers.lanes import panel_run

from notebook_launcher import LaunchPanel, SlurmCluster, log

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def where_am_i(steps: int):
    for step in range(steps):
        log({"loss": 1.0 / (step + 1)}, step=step)
    return {"rank": int(os.environ["RANK"]), "node": os.environ["SLURMD_NODENAME"]}


def test_the_panel_launches_on_slurm_and_its_ranks_span_both_nodes(slurm):
    # Opened on Slurm for the address and timeout (kept by the form); the rest set in the form.
    given = SlurmCluster(kernel_address="127.0.0.1", timeout=120)
    panel = LaunchPanel(where_am_i, args=(3,), num_processes=2, max_processes=2, cluster=given)
    assert panel.where.value == "Slurm"
    panel.num_processes.value = 4
    panel.nodes.value = 2
    panel.time_limit.value = "0:05:00"
    assert panel.settings().cluster == SlurmCluster(
        nodes=2, time="0:05:00", kernel_address="127.0.0.1", timeout=120
    )
    assert "4 ranks: 2 nodes × 2 tasks" in panel.plan.value
    handle, values = panel_run(panel, 180)
    assert [value["rank"] for value in values] == [0, 1, 2, 3]
    assert [value["node"] for value in values] == ["n1", "n1", "n2", "n2"]
    ranks = handle.model.ranks
    assert [state.node for state in ranks] == ["n1", "n1", "n2", "n2"]
    assert ">node<" in handle.view.status.value  # the status table's node column
