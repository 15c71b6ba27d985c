"""Two "nodes" (separate processes on loopback), 2 processes each, one group of 4: static rendezvous."""

from __future__ import annotations

import time

from noderun import free_port, on_node, run_nodes

TWO_NODES = dict(num_processes=2, num_nodes=2)


def test_collectives_across_nodes_and_results_per_node():
    # 127.0.0.2 is a loopback address too: the store must listen there and nowhere else.
    port = free_port("127.0.0.2")
    common = dict(TWO_NODES, master_addr="127.0.0.2", use_port=port)

    node0, node1 = run_nodes(
        on_node("sum_and_listeners", [1.0], node_rank=0, **common),
        on_node("sum_and_listeners", [1.0], node_rank=1, **common),
    )

    assert node0.result["ok"], str(node0.result) + node0.stdout + node0.stderr
    assert node1.result["ok"], str(node1.result) + node1.stdout + node1.stderr
    values0, values1 = node0.result["values"], node1.result["values"]
    # Each node gets its own processes' values, in local-rank order.
    assert [(v["rank"], v["local_rank"], v["node_rank"]) for v in values0] == [(0, 0, 0), (1, 1, 0)]
    assert [(v["rank"], v["local_rank"], v["node_rank"]) for v in values1] == [(2, 0, 1), (3, 1, 1)]
    assert {v["sum"] for v in values0 + values1} == {10.0}  # 1 + 2 + 3 + 4: all four ranks
    assert {v["world"] for v in values0 + values1} == {4}
    # Node 0's kernel hosts the store on exactly master_addr:use_port; node 1 listens nowhere.
    assert {tuple(v["listening"]) for v in values0} == {(f"127.0.0.2:{port}",)}
    assert {tuple(v["listening"]) for v in values1} == {()}
    # Output is labelled with the node and local rank as well as the global rank.
    assert "[node1:0 rank2] sum over 4 ranks: 10" in node1.lines
    assert "[node0:1 rank1] sum over 4 ranks: 10" in node0.lines
    # Nothing stays listening once the launch returned.
    assert node0.result["listening"] == [] and node1.result["listening"] == []


def test_failure_on_one_node_is_reported_on_both(port):
    common = dict(TWO_NODES, use_port=port)

    started = time.monotonic()
    node0, node1 = run_nodes(
        on_node("fail_on_rank", [3], node_rank=0, **common),
        on_node("fail_on_rank", [3], node_rank=1, **common),
    )
    took = time.monotonic() - started

    # The node where it happened raises the rank's own exception, naming rank and node.
    failed = node1.result
    assert failed["error_type"] == "ValueError"
    assert failed["error"] == "rank 3 gives up"
    assert "rank 3 (node 1, local rank 1, pid" in failed["notes"][0]
    assert "Traceback of rank 3" in failed["cause"]
    # The other node stops its ranks and says which node and rank failed, and why.
    remote = node0.result
    assert remote["error_type"] == "RemoteNodeFailedError"
    assert remote["node_rank"] == 1
    assert remote["error"].startswith("node 1 failed: rank 3 (node 1, local rank 1, pid")
    assert "ValueError: rank 3 gives up" in remote["error"]
    assert "This node (node 0) stopped its ranks 0, 1" in remote["error"]
    assert "Traceback of rank 3" in remote["error"]  # node 1's report travels with it
    assert remote["listening"] == [] and failed["listening"] == []  # exception kept, port closed
    assert took < 30


def test_missing_node_is_reported_after_the_bounded_wait():
    host_port, client_port = free_port(), free_port()

    started = time.monotonic()
    lonely_host, lonely_client = run_nodes(
        on_node("all_reduce", [1.0], node_rank=0, use_port=host_port, rdzv_timeout=2, **TWO_NODES),
        on_node(
            "all_reduce", [1.0], node_rank=1, use_port=client_port, rdzv_timeout=2, **TWO_NODES
        ),
    )
    took = time.monotonic() - started

    host = lonely_host.result
    assert host["error_type"] == "NodesMissingError"
    assert host["missing_nodes"] == [1] and host["missing_ranks"] == [2, 3]
    assert host["endpoint"] == f"127.0.0.1:{host_port}"
    assert f"node 1 (global ranks 2, 3) at the rendezvous 127.0.0.1:{host_port}" in host["error"]
    assert host["error"].startswith("gave up after 2 s (rdzv_timeout) waiting for node 1")
    assert host["listening"] == []
    client = lonely_client.result
    assert client["error_type"] == "NodesMissingError"
    assert client["missing_nodes"] == [0] and client["missing_ranks"] == [0, 1]
    assert (
        f"could not reach the rendezvous at 127.0.0.1:{client_port} within 2 s" in client["error"]
    )
    assert took < 20


def test_restarts_are_taken_by_every_node_together(port):
    common = dict(TWO_NODES, use_port=port, max_restarts=1)

    node0, node1 = run_nodes(
        on_node("fail_first_attempt", [3], node_rank=0, **common),
        on_node("fail_first_attempt", [3], node_rank=1, **common),
    )

    for node, ranks in ((node0, [0, 1]), (node1, [2, 3])):
        assert node.result["ok"], node.stdout + node.stderr
        assert node.result["restarts"] == 1
        assert [v["rank"] for v in node.result["values"]] == ranks
        assert {(v["attempt"], v["sum"]) for v in node.result["values"]} == {(1, 4.0)}
    assert any("restarting all 4 processes (restart 1 of 1)" in line for line in node0.lines)
    assert any("node 1 failed: rank 3" in line for line in node0.lines)


def test_nodes_that_disagree_on_num_processes_are_refused(port):
    node0, node1 = run_nodes(
        on_node("all_reduce", [1.0], num_processes=2, num_nodes=2, node_rank=0, use_port=port),
        on_node("all_reduce", [1.0], num_processes=1, num_nodes=2, node_rank=1, use_port=port),
    )

    for node in (node0, node1):
        assert node.result["error_type"] == "ValueError", node.stdout + node.stderr
        assert "every node must use the same num_processes" in node.result["error"]
