"""This project on Slurm against a hand-written ``sbatch`` script and submitit, side by side in one
run on the same local two-node Slurm (munged, slurmctld, slurmd n1 and n2, all on 127.0.0.1; the
test lane's).

* (a) start to result: a trivial job (join the process group, one ``all_reduce`` of a 1-element
  tensor) on 2 ranks, one per node, from the call until the caller holds every rank's value:
  ``notebook_launcher(..., cluster=SlurmCluster(nodes=2))`` (submits a job, starts the ranks as a
  step, cancels the job), against the floor: a hand-written ``sbatch --wait`` script whose ``srun``
  tasks form the group themselves (``MASTER_ADDR`` = the first node, ``RANK`` = ``SLURM_PROCID``)
  and write their values into a shared folder, read back once ``sbatch --wait`` returns. The
  first call of each is reported apart (cold); then the median of ``--repeats`` calls, in turns.
  And submitit running the same function (``AutoExecutor(cluster="slurm")``, 2 nodes x 1 task,
  ``job.results()``; each task sets its process group from submitit's own environment helper),
  when submitit is installed (``pip install -e .[bench]``); skipped otherwise.
* (b) a rank raises: rank 1 writes ``time.time()`` and raises ``KeyError`` while rank 0 goes on
  working for 20 s; the time until the caller holds the exception (ours, and submitit's
  ``job.results()`` raising).
* (c) a warm session call: ``Session(num_processes=2, cluster=...)``, ``session.exec("1")``,
  median of ``--calls``.

    python benchmarks/slurm_bench.py [--repeats 3] [--calls 30] [--json out.json]

Needs root (the daemons run as SlurmUser=root) and Debian's ``slurm-wlm`` and ``munge``.
submitit is a benchmark extra only (``bench``), never a dependency of the package.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/helpers
from helpers import slurmcluster  # noqa: E402

from notebook_launcher import (  # noqa: E402
    PartialState,
    Session,
    SlurmCluster,
    notebook_launcher,
)

CLUSTER = SlurmCluster(nodes=2, kernel_address="127.0.0.1")
OTHER_RANK_WORKS = 20  # seconds rank 0 goes on working while rank 1 has raised

FLOOR_SCRIPT = """#!/bin/sh
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=/dev/null
export MASTER_ADDR=127.0.0.1 MASTER_PORT={port}
srun {python} -c '
import os, pathlib, torch, torch.distributed as dist
os.environ["RANK"] = os.environ["SLURM_PROCID"]; os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
pathlib.Path("{folder}", os.environ["RANK"]).write_text(str(t.item()))
dist.destroy_process_group()
'
"""


def all_reduce() -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    return total.item()


def raise_on_rank_1(folder: str) -> None:
    if PartialState().process_index == 1:
        Path(folder, "raised").write_text(repr(time.time()))
        raise KeyError("rank 1")
    time.sleep(OTHER_RANK_WORKS)


def submitit_raise_on_rank_1(folder: str) -> None:
    if os.environ["SLURM_PROCID"] == "1":
        Path(folder, "raised").write_text(repr(time.time()))
        raise KeyError("rank 1")
    time.sleep(OTHER_RANK_WORKS)


def submitit_raise_time(folder: Path) -> float:
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(
        nodes=2, tasks_per_node=1, cpus_per_task=1, timeout_min=5, slurm_partition="debug"
    )
    with tempfile.TemporaryDirectory() as shared:
        job = executor.submit(submitit_raise_on_rank_1, shared)
        try:
            job.results()
        except Exception:  # submitit's FailedJobError, with the rank's traceback as text
            return time.time() - float(Path(shared, "raised").read_text())
    raise AssertionError("no error from submitit")


def ours() -> float:
    started = time.perf_counter()
    values = notebook_launcher(all_reduce, num_processes=2, cluster=CLUSTER, ui="none").values
    assert values == [2.0, 2.0], values
    return time.perf_counter() - started


def submitit_all_reduce() -> float:
    import submitit
    import torch
    import torch.distributed as dist

    submitit.helpers.TorchDistributedEnvironment().export()  # RANK, WORLD_SIZE, MASTER_*
    os.environ["MASTER_ADDR"] = "127.0.0.1"  # the local cluster's node names do not resolve
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    dist.destroy_process_group()
    return total.item()


def with_submitit(folder: Path) -> float:
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(
        nodes=2, tasks_per_node=1, cpus_per_task=1, timeout_min=5, slurm_partition="debug"
    )
    started = time.perf_counter()
    values = executor.submit(submitit_all_reduce).results()
    elapsed = time.perf_counter() - started
    assert values == [2.0, 2.0], values
    return elapsed


def has_submitit() -> bool:
    try:
        import submitit  # noqa: F401
    except ImportError:
        return False
    return True


def floor(cluster, port: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        script = FLOOR_SCRIPT.format(port=port, python=sys.executable, folder=folder)
        started = time.perf_counter()
        subprocess.run(
            ["sbatch", "--wait", "--parsable"],
            input=script,
            text=True,
            env=cluster.env,
            check=True,
            capture_output=True,
        )
        values = sorted(float(p.read_text()) for p in Path(folder).iterdir())
        elapsed = time.perf_counter() - started
    assert values == [2.0, 2.0], values
    return elapsed


def raise_time() -> float:
    with tempfile.TemporaryDirectory() as folder:
        try:
            notebook_launcher(
                raise_on_rank_1, args=(folder,), num_processes=2, cluster=CLUSTER, ui="none"
            )
        except KeyError:
            return time.time() - float(Path(folder, "raised").read_text())
    raise AssertionError("no KeyError")


def warm_calls(calls: int) -> float:
    session = Session(num_processes=2, cluster=CLUSTER, ui="none")
    try:
        session.exec("1")
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            session.exec("1")
            times.append(time.perf_counter() - started)
    finally:
        session.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    cluster = slurmcluster.start()
    try:
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        port = 29400
        submitit_folder = Path(tempfile.mkdtemp(prefix="nl-submitit-"))
        compare = has_submitit()
        report = {"floor_cold": floor(cluster, port), "ours_cold": ours()}
        if compare:
            report["submitit_cold"] = with_submitit(submitit_folder)
        floors, mine, theirs = [], [], []
        for repeat in range(options.repeats):
            floors.append(floor(cluster, port + 1 + repeat))
            mine.append(ours())
            if compare:
                theirs.append(with_submitit(submitit_folder))
        report["floor_median"] = statistics.median(floors)
        report["ours_median"] = statistics.median(mine)
        report["ratio"] = report["ours_median"] / report["floor_median"]
        if compare:
            report["submitit_median"] = statistics.median(theirs)
            report["submitit_ratio"] = report["submitit_median"] / report["floor_median"]
            report["ours_to_submitit"] = report["ours_median"] / report["submitit_median"]
        shutil.rmtree(submitit_folder, ignore_errors=True)
        report["raise_to_exception"] = raise_time()
        if compare:
            report["submitit_raise_to_exception"] = submitit_raise_time(submitit_folder)
        report["warm_session_call"] = warm_calls(options.calls)
    finally:
        cluster.stop()
    for name, value in report.items():
        print(f"{name:>28}: {value:.3f}{'' if 'ratio' in name or '_to_' in name else ' s'}")
    if options.json:
        options.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
