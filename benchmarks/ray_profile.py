"""Where a launch on a Ray cluster spends its time, phase by phase, from the kernel's view and
the ranks' (on the same local 2-node cluster as ``ray_bench.py``).

Each launch runs the trivial all_reduce job; the kernel's steps are timed by wrapping the Ray
launcher's methods in this process, the ranks' by what they report: when their actor's process
was created, when the function was entered, and when the process group was up. Between
launches it counts the cluster's idle workers (processes Ray started that host no actor yet).

    python benchmarks/ray_profile.py [--ranks 4] [--launches 4] [--gap 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import psutil
import torch
from ray_bench import SLOTS, start_two_nodes, stop  # ray_bench.py's cluster

import notebook_launcher.launch.launchers.ray as ray_launcher
from notebook_launcher import RayCluster, notebook_launcher
from notebook_launcher.launch.launchers.remote import links

marks: dict[str, float] = {}


def job() -> dict:
    started = time.time()
    from notebook_launcher import PartialState

    PartialState()
    joined = time.time()
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    return {
        "created": psutil.Process().create_time(),
        "entered": started,
        "joined": joined,
        "reduced": time.time(),
        "pid": os.getpid(),
    }


def _wrap(owner, name: str, before: str | None, after: str | None) -> None:
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if before:
            marks.setdefault(before, time.time())
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                marks.setdefault(after, time.time())

    setattr(owner, name, wrapped)


def _instrument() -> None:
    _wrap(ray_launcher.RayLauncher, "prepare", "join", "joined")
    _wrap(ray_launcher, "reserve", "reserve", "reserved")
    _wrap(ray_launcher.ClusterAttempt, "_await_ranks", "submitted", "connected")
    _wrap(ray_launcher.ClusterAttempt, "release", "release", "released")
    original = links.RemoteHandle.connected

    def connected(self, conn):
        marks[f"rank{self.rank}"] = time.time()
        return original(self, conn)

    links.RemoteHandle.connected = connected


def idle_workers() -> int:
    """Ray worker processes of this cluster that host no actor (named ``ray::IDLE``)."""
    count = 0
    for proc in psutil.Process().children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if line.startswith("ray::IDLE"):
            count += 1
    return count


def launch(ranks: int) -> dict:
    marks.clear()
    marks["call"] = time.time()
    found = notebook_launcher(
        job, num_processes=ranks, cluster=RayCluster(resources_per_process=SLOTS), ui="none"
    )
    marks["returned"] = time.time()
    rows = list(found)
    call = marks["call"]
    phases = {k: round(v - call, 3) for k, v in sorted(marks.items(), key=lambda kv: kv[1])}
    for key in ("created", "entered", "joined", "reduced"):
        phases[f"ranks_{key}"] = [round(r[key] - call, 3) for r in rows]
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--launches", type=int, default=4)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between launches")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    _instrument()
    cluster = start_two_nodes()
    runs = []
    try:
        for index in range(options.launches):
            idle = [idle_workers()]
            phases = launch(options.ranks)
            idle.append(idle_workers())
            phases["idle_before_after"] = idle
            runs.append(phases)
            print(f"launch {index}: {json.dumps(phases)}", flush=True)
            time.sleep(options.gap)
    finally:
        stop(cluster)
    warm = runs[1:]
    if warm:
        print(
            "warm median call to return:",
            statistics.median(r["returned"] for r in warm),
            flush=True,
        )
    if options.json:
        options.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
