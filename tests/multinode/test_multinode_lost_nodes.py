"""A node whose kernel dies or is interrupted stops the other node, which says so."""

from __future__ import annotations

import os
import signal
import time

from noderun import nodes, on_node


def lingering_nodes(port: int) -> list:
    """Two nodes whose ranks meet, print "ready", and wait for node 1's ranks for a minute."""
    common = dict(num_processes=2, num_nodes=2, use_port=port)
    return [on_node("node_1_lingers", [60], node_rank=rank, **common) for rank in (0, 1)]


def test_a_node_whose_kernel_dies_is_reported(port):
    with nodes(*lingering_nodes(port)) as running:
        running.wait_for_line(1, "[node1:0 rank2] ready")
        os.kill(running.procs[1].pid, signal.SIGKILL)  # its workers die with it
        killed = time.monotonic()
        survivor, _ = running.wait()
        took = time.monotonic() - killed

    result = survivor.result
    assert result["error_type"] == "RemoteNodeFailedError", survivor.stdout + survivor.stderr
    assert result["node_rank"] == 1
    assert result["error"].startswith("node 1 stopped: it sent no heartbeat for 5 s")
    assert "This node (node 0) stopped its ranks 0, 1" in result["error"]
    assert result["listening"] == []
    assert took < 15


def test_the_hosting_kernel_dying_is_reported(port):
    with nodes(*lingering_nodes(port)) as running:
        running.wait_for_line(0, "[node0:0 rank0] ready")
        os.kill(running.procs[0].pid, signal.SIGKILL)
        _, survivor = running.wait()

    result = survivor.result
    assert result["error_type"] == "RemoteNodeFailedError", survivor.stdout + survivor.stderr
    assert result["node_rank"] == 0
    assert f"lost the connection to the rendezvous store at 127.0.0.1:{port}" in result["error"]
    assert "hosted by node 0" in result["error"]


def test_an_interrupt_on_one_node_stops_the_other(port):
    with nodes(*lingering_nodes(port)) as running:
        running.wait_for_line(1, "[node1:0 rank2] ready")
        os.kill(running.procs[1].pid, signal.SIGINT)  # the stop button of node 1's notebook
        other, interrupted = running.wait()

    assert interrupted.result["error_type"] == "KeyboardInterrupt"
    result = other.result
    assert result["error_type"] == "RemoteNodeFailedError", other.stdout + other.stderr
    assert result["error"].startswith(
        "node 1 stopped: its launch was interrupted (KeyboardInterrupt)"
    )
    assert result["listening"] == []
