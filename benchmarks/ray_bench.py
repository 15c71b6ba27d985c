"""This project on a Ray cluster against Ray Train's ``TorchTrainer``, side by side in one run on the
same local multi-node Ray cluster (every node bound to 127.0.0.1).

The cluster: a head node and a second node, 2 CPUs and 2 ``slot`` resources each; every job runs
4 ranks (workers) reserving ``{"CPU": 1, "slot": 1}``, so 2 land on each node. The driver (this
process) joins it as a notebook's kernel would.

* (a) start to result: a trivial job (join the process group, one ``all_reduce`` of a 1-element
  tensor), from the call to its return: ``notebook_launcher(..., cluster=...)`` and
  ``TorchTrainer(...).fit()``. The first call of each is reported apart (cold); then the median
  of ``--repeats`` calls on the warm cluster, taken in turns. The floor comes first: the same
  job on hand-made actors (one placement group, each actor joins the process group itself),
  nothing but Ray and torch; every launcher is also reported as a ratio to it.
* (b) a rank raises: rank 1 writes ``time.time()`` and raises ``KeyError``; the time until the
  caller holds the exception, and which type it holds.
* (c) a warm session call: ``Session(num_processes=4, cluster=...)``, ``session.exec("1")``,
  median of ``--calls``. ``TorchTrainer`` has no sessions: every ``fit()`` starts a new worker
  group (see (a)).
* (d) a node removed: a third node joins with one ``pair`` resource, as the second has; 2 ranks
  reserving ``{"CPU": 1, "pair": 1}`` run one on each of them, each writes which node it is on,
  then the third node is removed (``Cluster.remove_node``: its raylet and workers killed); the
  time from the removal until the caller holds an error.

    python benchmarks/ray_bench.py [--repeats 3] [--calls 50] [--json out.json]
    python benchmarks/ray_bench.py --only start --ranks 2 --placement spread   # (a) alone, 2 ranks

Needs the ``ray`` extra and Ray Train (``pip install -e .[ray,bench]``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# The Ray lane's two-node loopback cluster; Ray reads these when it is imported.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/helpers
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # with node_ip_address: loopback only
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray  # noqa: E402
import torch  # noqa: E402
from helpers.raycluster import NODE_ARGS as NODE  # noqa: E402
from helpers.raycluster import SLOTS, start_two_nodes, stop  # noqa: E402

from notebook_launcher import RayCluster, Session, notebook_launcher  # noqa: E402

PAIRED = {"CPU": 1, "pair": 1}
RANKS = 4
LIMIT = 180.0  # seconds any one measured call may take


# -- the jobs (shipped by value: this module is not importable on the nodes) ----------------------


def all_reduce_ours() -> float:
    from notebook_launcher import PartialState

    PartialState()
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    return value.item()


def all_reduce_ray_train(config: dict) -> None:
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    assert value.item() == config["ranks"]


def raise_on_rank_one(folder: str, rank: int) -> None:
    if rank == 1:
        Path(folder, "raised").write_text(repr(time.time()))
        raise KeyError("no such key on rank 1")
    time.sleep(120)


def raise_ours(folder: str) -> None:
    raise_on_rank_one(folder, int(os.environ["RANK"]))


def raise_ray_train(config: dict) -> None:
    raise_on_rank_one(config["folder"], ray.train.get_context().get_world_rank())


def wait_on_node(folder: str, rank: int) -> None:
    Path(folder, f"ready{rank}").write_text(ray.get_runtime_context().get_node_id())
    time.sleep(120)


def wait_ours(folder: str) -> None:
    wait_on_node(folder, int(os.environ["RANK"]))


def wait_ray_train(config: dict) -> None:
    wait_on_node(config["folder"], ray.train.get_context().get_world_rank())


# -- the two ways to run a job -----------------------------------------------------------------


PLACEMENT = {"placement": "pack"}  # of every job; --placement spread: 2 ranks on 2 nodes


def run_ours(function, args: tuple, resources: dict, ranks: int):
    cluster = RayCluster(resources_per_process=resources, placement=PLACEMENT["placement"])
    return notebook_launcher(function, args=args, num_processes=ranks, cluster=cluster, ui="none")


def run_ray_train(function, config: dict, resources: dict, ranks: int):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        function,
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=ranks,
            resources_per_worker=resources,
            placement_strategy=PLACEMENT["placement"].upper(),
        ),
        run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="ray_bench-")),
    )
    return trainer.fit()


class BareRank:
    """The floor: a rank written by hand with nothing but Ray and torch (no launcher)."""

    def address(self) -> tuple[str, int]:
        import socket

        with socket.socket() as probe:
            probe.bind((ray.util.get_node_ip_address(), 0))
            return probe.getsockname()

    def all_reduce(self, url: str, rank: int, ranks: int) -> float:
        torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=ranks)
        value = torch.ones(1)
        torch.distributed.all_reduce(value)
        torch.distributed.destroy_process_group()
        return value.item()


def run_bare_ray(resources: dict, ranks: int) -> list[float]:
    """The trivial job on ``ranks`` hand-made actors in one placement group, as a user who knows
    Ray and torch would write it: what any launcher on Ray starts from."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    shape = dict(resources)
    cpus = shape.pop("CPU", 0)
    group = placement_group([dict(resources)] * ranks, strategy=PLACEMENT["placement"].upper())
    actors = []
    try:
        ray.get(group.ready(), timeout=LIMIT)
        rank_class = ray.remote(BareRank)
        actors = [
            rank_class.options(
                num_cpus=cpus,
                resources=shape,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, index),
            ).remote()
            for index in range(ranks)
        ]
        host, port = ray.get(actors[0].address.remote(), timeout=LIMIT)
        url = f"tcp://{host}:{port}"
        return ray.get(
            [actor.all_reduce.remote(url, rank, ranks) for rank, actor in enumerate(actors)],
            timeout=LIMIT,
        )
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


# -- the measurements --------------------------------------------------------------------------


def start_to_result(repeats: int, ranks: int = RANKS, names: tuple = ("ours", "ray_train")) -> dict:
    runs = {
        "bare_ray": lambda: run_bare_ray(SLOTS, ranks),
        "ours": lambda: run_ours(all_reduce_ours, (), SLOTS, ranks),
        "ray_train": lambda: run_ray_train(all_reduce_ray_train, {"ranks": ranks}, SLOTS, ranks),
    }
    order = ("bare_ray", *names)
    cold = {name: timed(runs[name]) for name in order}
    warm: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(repeats):  # in turns, so that a drift of the machine's load hits each alike
        for name in order:
            warm[name].append(timed(runs[name]))
    found = {}
    for name in order:
        found[name] = {
            "cold": cold[name],
            "warm": warm[name],
            "median": statistics.median(warm[name]),
        }
        print(
            f"(a) {name}: cold {cold[name]:.2f} s, warm median {found[name]['median']:.2f} s",
            flush=True,
        )
    floor = found["bare_ray"]["median"]
    for name in names:
        found[name]["to_bare_ray"] = found[name]["median"] / floor
        print(f"(a) {name}: {found[name]['to_bare_ray']:.2f}x the hand-made floor", flush=True)
    return found


def raise_to_exception(repeats: int, names: tuple = ("ours", "ray_train")) -> dict:
    found = {}
    for name in names:
        samples, kinds = [], set()
        for _ in range(repeats):
            folder = tempfile.mkdtemp(prefix="ray_bench-")
            try:
                if name == "ours":
                    run_ours(raise_ours, (folder,), SLOTS, RANKS)
                else:
                    run_ray_train(raise_ray_train, {"folder": folder}, SLOTS, RANKS)
                kinds.add("no exception")
                continue
            except BaseException as error:  # noqa: BLE001 - what the caller holds is the point
                caught = time.time()
                kinds.add(type(error).__name__)
            samples.append(caught - float(Path(folder, "raised").read_text()))
        found[name] = {
            "seconds": samples,
            "median": statistics.median(samples),
            "types": sorted(kinds),
        }
        print(
            f"(b) {name}: median {found[name]['median']:.3f} s, raised {sorted(kinds)}", flush=True
        )
    return found


def session_call(calls: int) -> dict:
    with Session(
        num_processes=RANKS, cluster=RayCluster(resources_per_process=SLOTS), ui="none"
    ) as s:
        for _ in range(5):
            s.exec("1")
        seconds = sorted(timed(lambda: s.exec("1")) for _ in range(calls))
    found = {"median": statistics.median(seconds), "p90": seconds[int(0.9 * (len(seconds) - 1))]}
    print(f"(c) ours: warm session call median {found['median'] * 1000:.1f} ms", flush=True)
    return found


def node_removed(cluster: Any, repeats: int, names: tuple = ("ours", "ray_train")) -> dict:
    found = {}
    for name in names:
        samples, kinds = [], set()
        for _ in range(repeats):
            doomed = cluster.add_node(**NODE, resources={"slot": 2, "pair": 1})
            cluster.wait_for_nodes()
            folder = tempfile.mkdtemp(prefix="ray_bench-")
            outcome: dict = {}

            def run(folder=folder, outcome=outcome, name=name) -> None:
                try:
                    if name == "ours":
                        run_ours(wait_ours, (folder,), PAIRED, 2)
                    else:
                        run_ray_train(wait_ray_train, {"folder": folder}, PAIRED, 2)
                    outcome["error"] = "no exception"
                except BaseException as error:  # noqa: BLE001
                    outcome["error"] = type(error).__name__
                outcome["at"] = time.monotonic()

            caller = threading.Thread(target=run, daemon=True)
            caller.start()
            deadline = time.monotonic() + LIMIT
            while len(list(Path(folder).glob("ready*"))) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            removed = time.monotonic()
            cluster.remove_node(doomed)
            caller.join(LIMIT)
            if "at" in outcome:
                samples.append(outcome["at"] - removed)
            kinds.add(outcome.get("error", f"nothing within {LIMIT:g} s"))
        found[name] = {
            "seconds": samples,
            "median": statistics.median(samples) if samples else None,
            "types": sorted(kinds),
        }
        median = found[name]["median"]
        shown = f"{median:.2f} s" if median is not None else "none"
        print(f"(d) {name}: removal to error {shown}, raised {sorted(kinds)}", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--only",
        choices=("start", "raise", "session", "node"),
        action="append",
        help="run only these measurements: (a) start, (b) raise, (c) session, (d) node "
        "(repeatable; default: all)",
    )
    parser.add_argument("--ranks", type=int, default=RANKS, help="ranks of (a) (default 4)")
    parser.add_argument(
        "--placement",
        choices=("pack", "spread"),
        default="pack",
        help="where the ranks of both go (spread: --ranks 2 puts one on each node)",
    )
    parser.add_argument(
        "--ours-only", action="store_true", help="leave Ray Train's TorchTrainer out"
    )
    options = parser.parse_args()
    PLACEMENT["placement"] = options.placement
    only = set(options.only or ("start", "raise", "session", "node"))
    names = ("ours",) if options.ours_only else ("ours", "ray_train")
    cluster = start_two_nodes()
    try:
        results: dict = {}
        if "start" in only:
            results["start_to_result"] = start_to_result(options.repeats, options.ranks, names)
        if "raise" in only:
            results["raise_to_exception"] = raise_to_exception(options.repeats, names)
        if "session" in only:
            results["session_call"] = session_call(options.calls)
        if "node" in only:
            results["node_removed"] = node_removed(cluster, max(1, options.repeats // 2), names)
        results["machine"] = {"cpus": os.cpu_count(), "load": os.getloadavg()}
    finally:
        stop(cluster)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
