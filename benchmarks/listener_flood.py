"""What 1,000 hostile connections cost a launch on a Ray cluster: a kernel (a process of its own,
limited to 1,024 open files) launches 2 ranks on the Ray lane's two-node loopback cluster, once
alone and once while another process opens 1,000 connections to its listener at once (none ever
authenticates; see ``tests/helpers/flood.py``). Reported per run: the outcome, the seconds from
the call to its return, and the most file descriptors and threads the kernel held meanwhile.

    python benchmarks/listener_flood.py [--connections 1000] [--repeats 1]

Needs the ``ray`` extra. Every address used is 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/helpers
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # with node_ip_address: loopback only
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
from helpers.flood import FILE_LIMIT, flooded_launch  # noqa: E402
from helpers.raycluster import start_two_nodes, stop  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    local = start_two_nodes()
    try:
        print(f"kernel limited to {FILE_LIMIT} open files; 2 ranks on 2 loopback nodes")
        for _ in range(args.repeats):
            for count in (0, args.connections):
                said = flooded_launch(local.address, count)
                outcome = f"result of {said['result']} ranks" if "result" in said else said
                print(f"{count:5d} hostile connections: {outcome}; {said.get('took', '?')}")
    finally:
        stop(local)


if __name__ == "__main__":
    main()
