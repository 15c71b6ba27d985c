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
from pathlib import Path

import psutil
import pytest
from helpers.lanes import lane_ends, mark_lane
from helpers.processtree import listening, live_descendants
from helpers.raycluster import (
    NO_RAY,
    held_groups,
    live_actors,
    rank_processes,
    ray,
    start_two_nodes,
    stop,
)

SETTLE = 5.0  # seconds the cluster gets to show a launch's actors dead and its group removed
# Seconds a test of the lane may take: its launches may wait START seconds for their ranks.
LANE_TIMEOUT = 900


HERE = Path(__file__).resolve().parent
_running: list = []  # the lane's cluster while its tests run


def pytest_collection_modifyitems(config, items):
    mark_lane(items, HERE, LANE_TIMEOUT)


@pytest.fixture
def cluster():
    """The head node and one worker node; this process joined as the driver. Started for the
    first test of the lane and shut down after its last one (see below), so that tests elsewhere
    in the same run never see its processes."""
    if ray is None:
        pytest.skip(NO_RAY)
    if not _running:
        _running.append(start_two_nodes())
    return _running[0]


def _stop(local) -> None:
    stop(local)
    _await_cluster_gone()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the lane's last test (the next one lives elsewhere, or there is none): stop the
    cluster, once the test's own fixtures were torn down."""
    if _running and lane_ends(nextitem, HERE):
        _stop(_running.pop())


def _await_cluster_gone(limit: float = 15.0) -> None:
    """The cluster's processes (nodes, workers, their helpers) are this process's children:
    wait until they are gone, and kill what is left, so that no later test finds them."""
    deadline = time.monotonic() + limit
    while live_descendants() and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in live_descendants():
        try:
            proc.kill()
        except psutil.Error:
            pass


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
