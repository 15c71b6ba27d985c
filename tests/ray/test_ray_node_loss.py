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


def _both_sleeping(folder: Path, settings: RayCluster):
    """A launch of 2 ranks running :func:`sleep_on`, once both run."""
    handle = launch_in_background(
        sleep_on, args=(str(folder),), num_processes=2, cluster=settings, ui="none"
    )
    deadline = time.monotonic() + 120
    while not all((folder / f"ready{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline and not handle.done, handle.exception
        time.sleep(0.05)
    return handle


def _running_on_a_new_node(cluster, tmp_path, settings: RayCluster):
    """A node added for the test, and a launch of 2 ranks sleeping, one on it and one on the
    lane's second node: ``(node, handle, the rank on the node)`` once both ranks run."""
    doomed = cluster.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
    cluster.wait_for_nodes()
    handle = _both_sleeping(tmp_path, settings)
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
    # Its only rank: a frozen rank and a frozen node look the same from here, and both are said.
    assert f"rank {rank} stopped answering" in text and "or its node frozen" in text, text
    assert doomed.node_id in text and "sent nothing for 5 s" in text
    assert "was killed after it went silent" in text and "SIGKILL" not in text
    assert "node_timeout" in text
    assert f"Stopped because of this failure: rank {1 - rank}" in text
    assert 5 <= took < 15
    print(f"node frozen to error: {took:.2f} s")


def test_a_frozen_rank_alone_on_its_node_is_named_not_its_node(cluster, tmp_path):
    """One rank SIGSTOPped while its node and Ray stay healthy: the rank stopped answering, and
    Ray still sees its node (not "its node stopped answering ... died with signal SIGKILL")."""
    spread = RayCluster(
        resources_per_process={"CPU": 1, "slot": 1},
        placement="spread",
        node_timeout=5,
        timeout=START,
    )
    handle = _both_sleeping(tmp_path, spread)
    deadline = time.monotonic() + 120
    nodes = [(tmp_path / f"ready{r}").read_text() for r in (0, 1)]
    assert nodes[0] != nodes[1], "placement='spread' put both ranks on one node"
    frozen = psutil.Process(int((tmp_path / "pid1").read_text()))
    frozen.send_signal(signal.SIGSTOP)
    try:
        while not handle.done:
            assert time.monotonic() < deadline + 60, "a silent rank was not noticed"
            time.sleep(0.05)
    finally:
        try:
            frozen.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
    text = str(handle.exception)
    assert isinstance(handle.exception, WorkersFailedError)
    assert "rank 1 stopped answering" in text and "sent nothing for 5 s" in text, text
    assert f"it was alone on node 1 at {LOOPBACK}" in text and nodes[1] in text
    assert "Ray still sees it as alive" in text
    assert "its node stopped answering" not in text and "SIGKILL" not in text
    assert "Stopped because of this failure: rank 0" in text


def test_a_node_removed_between_session_calls_is_named_in_the_notice_and_the_next_call(
    cluster, capsys
):
    doomed = cluster.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
    cluster.wait_for_nodes()
    session = Session(num_processes=2, cluster=PAIRED, ui="none")
    try:
        rank = session.run(_on, doomed.node_id).values.index(1)
        capsys.readouterr()
        cluster.remove_node(doomed)  # the session is idle: no call runs
        deadline = time.monotonic() + 60
        while session.state == "alive":
            assert time.monotonic() < deadline, "the lost node was not noticed between calls"
            time.sleep(0.05)
        with pytest.raises(SessionBrokenError) as info:
            session.exec("1")
        said = capsys.readouterr()
        for text in (said.out + said.err, str(info.value)):
            assert f"rank {rank} died" in text and "its node was lost" in text, text
            assert doomed.node_id in text and f"address {LOOPBACK}" in text
            assert f"with rank {rank} on it" in text
    finally:
        session.close()
