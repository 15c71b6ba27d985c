"""A node removed mid-run (its raylet and its workers killed: a real node loss), or one that stops
answering without closing a connection (frozen or cut off), ends the run with an error naming the
node, its address and its ranks; the other ranks are stopped."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import psutil
import pytest
from helpers.raycluster import LOOPBACK, NODE_ARGS, START

from notebook_launcher import (
    RayCluster,
    Session,
    SessionBrokenError,
    WorkersFailedError,
    launch_in_background,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
PAIRED = RayCluster(resources_per_process={"CPU": 1, "pair": 1}, timeout=START)


def sleep_on(folder: str):
    import ray

    node = ray.get_runtime_context().get_node_id()
    Path(folder, f"pid{os.environ['RANK']}").write_text(str(os.getpid()))
    Path(folder, f"ready{os.environ['RANK']}").write_text(node)
    time.sleep(120)


def _running_on_a_new_node(cluster, tmp_path, settings: RayCluster):
    """A node added for the test, and a launch of 2 ranks sleeping, one on it and one on the
    lane's second node: ``(node, handle, the rank on the node)`` once both ranks run."""
    doomed = cluster.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
    cluster.wait_for_nodes()
    handle = launch_in_background(
        sleep_on, args=(str(tmp_path),), num_processes=2, cluster=settings, ui="none"
    )
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline and not handle.done, handle.exception
        time.sleep(0.05)
    (rank,) = {r for r in (0, 1) if (tmp_path / f"ready{r}").read_text() == doomed.node_id}
    return doomed, handle, rank


def test_a_lost_node_ends_the_run_naming_it(cluster, tmp_path):
    doomed, handle, rank = _running_on_a_new_node(cluster, tmp_path, PAIRED)
    removed = time.monotonic()
    cluster.remove_node(doomed)
    while not handle.done:
        assert time.monotonic() - removed < 60
        time.sleep(0.01)
    took = time.monotonic() - removed
    error = handle.exception
    assert isinstance(error, WorkersFailedError)
    text = str(error)
    assert f"rank {rank} " in text and "its node was lost" in text
    assert doomed.node_id in text and f"address {LOOPBACK}" in text
    assert f"with rank {rank} on it" in text
    assert f"Stopped because of this failure: rank {1 - rank}" in text
    print(f"node removed to error: {took:.2f} s")


def test_a_node_that_stops_its_ranks_as_it_leaves_is_named_lost(cluster, tmp_path):
    """A node shut down on purpose (preempted, scaled down) sends its processes SIGTERM before it
    goes: the rank reports the stop it got, and the error still says its node left."""
    doomed, handle, rank = _running_on_a_new_node(cluster, tmp_path, PAIRED)
    os.kill(int((tmp_path / f"pid{rank}").read_text()), signal.SIGTERM)
    cluster.remove_node(doomed)
    deadline = time.monotonic() + 60
    while not handle.done:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    text = str(handle.exception)
    assert isinstance(handle.exception, WorkersFailedError)
    assert f"rank {rank} " in text and "its node was lost" in text, text
    assert doomed.node_id in text and "SIGTERM the launcher did not send" not in text


def _on(node_id: str) -> int:
    import ray

    return int(ray.get_runtime_context().get_node_id() == node_id)


def test_a_node_shut_down_during_a_session_call_breaks_the_session_naming_it(cluster):
    doomed = cluster.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
    cluster.wait_for_nodes()
    session = Session(num_processes=2, cluster=PAIRED, ui="none")
    try:
        on_doomed = session.run(_on, doomed.node_id).values
        rank = on_doomed.index(1)
        pid = session.exec("import os, time\nos.getpid()").values[rank]

        def shut_down():  # as a preempted or scaled-down node does: SIGTERM, then gone
            os.kill(pid, signal.SIGTERM)
            cluster.remove_node(doomed)

        timer = threading.Timer(1.0, shut_down)
        timer.start()
        try:
            with pytest.raises(SessionBrokenError) as info:
                session.exec("time.sleep(60)")
        finally:
            timer.join()
        text = str(info.value)
        assert f"rank {rank} of the session died" in text and "its node was lost" in text, text
        assert doomed.node_id in text
        assert session.state == "broken"
    finally:
        session.close()


def _frozen(node) -> list[psutil.Process]:
    """Stop (SIGSTOP) the node's raylet and every process under it (its ranks' actors): a node
    that hangs, or is cut off, without closing a connection."""
    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    processes = [raylet, *raylet.children(recursive=True)]
    for process in processes:
        process.send_signal(signal.SIGSTOP)
    return processes


def test_a_node_that_stops_answering_ends_the_run_within_node_timeout(cluster, tmp_path):
    watched = RayCluster(resources_per_process={"CPU": 1, "pair": 1}, node_timeout=5, timeout=START)
    doomed, handle, rank = _running_on_a_new_node(cluster, tmp_path, watched)
    frozen = _frozen(doomed)
    stopped = time.monotonic()
    try:
        while not handle.done:
            assert time.monotonic() - stopped < 30, "a silent node was not noticed"
            time.sleep(0.05)
        took = time.monotonic() - stopped
    finally:
        for process in frozen:
            try:
                process.kill()
            except psutil.Error:
                pass
        cluster.remove_node(doomed, allow_graceful=False)
    text = str(handle.exception)
    assert isinstance(handle.exception, WorkersFailedError)
    assert f"rank {rank} " in text and "its node stopped answering" in text
    assert doomed.node_id in text and "sent nothing for 5 s" in text
    assert f"with rank {rank} on it" in text and "node_timeout" in text
    assert f"Stopped because of this failure: rank {1 - rank}" in text
    assert 5 <= took < 15
    print(f"node frozen to error: {took:.2f} s")
