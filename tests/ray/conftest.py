"""A real multi-node Ray cluster on this machine, bound to 127.0.0.1 only, shared by the Ray lane.

Two nodes (the head and one more), each with 2 CPUs and 2 ``slot`` resources, so that a launch of
4 ranks reserving ``{"CPU": 1, "slot": 1}`` each lands 2 ranks on each node. The second node also
has one ``pair``, as has the node the node-loss test adds (and removes): 2 ranks reserving
``{"CPU": 1, "pair": 1}`` run one on each of those two.

The kernel (this test process) is the cluster's driver, as a notebook's kernel would be. After
each test nothing of a launch may be left: no actor alive and no placement group held (read from
the cluster, as a driver reads them without the dashboard), no rank actor's process, no listening
socket in this process.
"""

from __future__ import annotations

import time

import pytest
from raycluster import (
    LOOPBACK,
    NO_RAY,
    NODE_ARGS,
    held_groups,
    listening,
    live_actors,
    rank_processes,
    ray,
)

SETTLE = 5.0  # seconds the cluster gets to show a launch's actors dead and its group removed


@pytest.fixture(scope="package")
def cluster():
    """The head node and one worker node; this process joined as the driver."""
    if ray is None:
        pytest.skip(NO_RAY)
    from ray.cluster_utils import Cluster

    local = Cluster(
        initialize_head=True,
        head_node_args={**NODE_ARGS, "include_dashboard": False, "resources": {"slot": 2}},
    )
    try:
        local.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
        local.wait_for_nodes()
        ray.init(address=local.address, log_to_driver=False, _node_ip_address=LOOPBACK)
        yield local
    finally:
        ray.shutdown()
        local.shutdown()


@pytest.fixture(autouse=True)
def no_leaks(cluster):
    """Replaces the suite's check (the cluster's own processes are this process's children):
    after each test no actor, placement group, rank process or listener of ours is left."""
    ports_before = listening()
    yield
    deadline = time.monotonic() + SETTLE
    while (live_actors() or held_groups() or rank_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not live_actors(), f"actors left alive: {live_actors()}"
    assert not held_groups(), f"placement groups left: {held_groups()}"
    assert not rank_processes(), f"rank processes left: {rank_processes()}"
    new = listening() - ports_before
    assert not new, f"sockets left listening in the kernel: {sorted(new)}"
