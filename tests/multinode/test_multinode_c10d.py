"""Two "nodes" meeting through torch's dynamic rendezvous (rdzv_backend="c10d")."""

from __future__ import annotations

import time

from noderun import free_port, on_node, run_nodes

TWO_NODES = dict(num_processes=2, num_nodes=2, rdzv_backend="c10d", rdzv_id="job")


def test_collectives_across_nodes_and_results_per_node():
    endpoint = f"127.0.0.3:{free_port('127.0.0.3')}"

    first, second = run_nodes(
        on_node("sum_and_listeners", [2.0], rdzv_endpoint=endpoint, **TWO_NODES),
        on_node("sum_and_listeners", [2.0], rdzv_endpoint=endpoint, **TWO_NODES),
    )

    assert first.result["ok"], first.stdout + first.stderr
    assert second.result["ok"], second.stdout + second.stderr
    # The rendezvous assigns the node ranks: one process got node 0, the other node 1.
    by_node = {}
    for finished in (first, second):
        values = finished.result["values"]
        (node_rank,) = {v["node_rank"] for v in values}
        by_node[node_rank] = values
    assert sorted(by_node) == [0, 1]
    for node_rank, values in by_node.items():
        ranks = [2 * node_rank, 2 * node_rank + 1]
        assert [(v["rank"], v["local_rank"]) for v in values] == [(ranks[0], 0), (ranks[1], 1)]
        assert {(v["sum"], v["world"]) for v in values} == {(20.0, 4)}
    # Exactly one kernel hosts the store, listening on exactly the endpoint's address.
    listening = [tuple(v["listening"]) for f in (first, second) for v in f.result["values"]]
    assert sorted(listening) == [(), (), (endpoint,), (endpoint,)]
    assert first.result["listening"] == [] and second.result["listening"] == []


def test_failure_on_one_node_is_reported_on_both():
    endpoint = f"127.0.0.1:{free_port()}"

    results = [
        f.result
        for f in run_nodes(
            on_node("fail_on_rank", [3], rdzv_endpoint=endpoint, **TWO_NODES),
            on_node("fail_on_rank", [3], rdzv_endpoint=endpoint, **TWO_NODES),
        )
    ]

    by_type = {r["error_type"]: r for r in results}
    assert sorted(by_type) == ["RemoteNodeFailedError", "ValueError"], results
    assert "rank 3 (node 1, local rank 1, pid" in by_type["ValueError"]["notes"][0]
    remote = by_type["RemoteNodeFailedError"]
    assert remote["node_rank"] == 1
    assert remote["error"].startswith("node 1 failed: rank 3 (node 1, local rank 1, pid")
    assert "This node (node 0) stopped its ranks 0, 1" in remote["error"]
    assert all(r["listening"] == [] for r in results)


def test_missing_node_is_reported_after_the_bounded_wait():
    endpoint = f"127.0.0.1:{free_port()}"

    started = time.monotonic()
    (alone,) = run_nodes(
        on_node("all_reduce", [1.0], rdzv_endpoint=endpoint, rdzv_timeout=2, **TWO_NODES)
    )
    took = time.monotonic() - started

    result = alone.result
    assert result["error_type"] == "NodesMissingError", alone.stdout + alone.stderr
    assert result["endpoint"] == endpoint
    assert result["missing_ranks"] == [2, 3]
    assert (
        f"only 1 of 2 nodes joined the c10d rendezvous rdzv_id='job' at {endpoint}"
        in result["error"]
    )
    assert "global ranks 2, 3 have no node" in result["error"]
    assert result["listening"] == []
    assert took < 15


def test_restarts_are_taken_by_every_node_together():
    endpoint = f"127.0.0.1:{free_port()}"
    common = dict(TWO_NODES, rdzv_endpoint=endpoint, max_restarts=1)

    finished = run_nodes(
        on_node("fail_first_attempt", [3], **common), on_node("fail_first_attempt", [3], **common)
    )

    ranks = []
    for node in finished:
        assert node.result["ok"], node.stdout + node.stderr
        assert node.result["restarts"] == 1
        assert {(v["attempt"], v["sum"]) for v in node.result["values"]} == {(1, 4.0)}
        ranks += [v["rank"] for v in node.result["values"]]
    assert sorted(ranks) == [0, 1, 2, 3]
