"""A node removed mid-run (its raylet and its workers killed: a real node loss) ends the run with
an error naming the node, its address and its ranks; the other ranks are stopped."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import cloudpickle
from raycluster import LOOPBACK, NODE_ARGS

from notebook_launcher import RayCluster, WorkersFailedError, launch_in_background

cloudpickle.register_pickle_by_value(sys.modules[__name__])
PAIRED = RayCluster(resources_per_process={"CPU": 1, "pair": 1})


def sleep_on(folder: str):
    import ray

    node = ray.get_runtime_context().get_node_id()
    Path(folder, f"ready{os.environ['RANK']}").write_text(node)
    time.sleep(120)


def test_a_lost_node_ends_the_run_naming_it(cluster, tmp_path):
    doomed = cluster.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
    cluster.wait_for_nodes()
    handle = launch_in_background(
        sleep_on, args=(str(tmp_path),), num_processes=2, cluster=PAIRED, ui="none"
    )
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline and not handle.done, handle.exception
        time.sleep(0.05)
    ranks = {r for r in (0, 1) if (tmp_path / f"ready{r}").read_text() == doomed.node_id}
    assert len(ranks) == 1
    removed = time.monotonic()
    cluster.remove_node(doomed)
    while not handle.done:
        assert time.monotonic() - removed < 60
        time.sleep(0.01)
    took = time.monotonic() - removed
    error = handle.exception
    assert isinstance(error, WorkersFailedError)
    text = str(error)
    (rank,) = ranks
    assert f"rank {rank} " in text and "its node was lost" in text
    assert doomed.node_id in text and f"address {LOOPBACK}" in text
    assert f"with rank {rank} on it" in text
    assert f"Stopped because of this failure: rank {1 - rank}" in text
    print(f"node removed to error: {took:.2f} s")
