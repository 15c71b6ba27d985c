"""1,000 connections that never authenticate, opened at once against the listener of a launch
whose kernel may hold 1,024 open files: the launch completes (or fails naming what ran out)."""

from __future__ import annotations

from helpers.flood import FILE_LIMIT, flooded_launch


def test_a_launch_completes_through_a_thousand_hostile_connections(cluster):
    said = flooded_launch(cluster.address, 1000)
    assert said.get("listening", "None") != "None" and "took" in said, said
    if "error" in said:  # allowed only if it says what ran out, and what to do
        assert "ran out of" in said["error"] and "ulimit -n" in said["error"], said
        assert "install the same versions" not in said["error"]
    else:
        assert said["result"] == "2", said
    print(f"2 ranks through 1,000 hostile connections: {said['took']}")
    # What the flood cost the kernel: no thread per connection, and a bounded number waiting.
    _, _, fds, _, threads = said["took"].split()
    assert int(threads) < 50, f"{threads} threads in the kernel during the flood"
    assert int(fds) < FILE_LIMIT // 2, f"{fds} open files in the kernel during the flood"
