"""How soon a stuck job is noticed and stopped, that a busy one never is, and how long a graceful
stop takes: the supervisor's figures, with Accelerate's launcher beside them where it applies.

    python benchmarks/stall_bench.py                 # 5 trials a scenario, stall_timeout=10
    python benchmarks/stall_bench.py --trials 10 --load 2 --json out.json

Every time is wall-clock seconds from the moment the ranks fell silent (each rank writes
``time.time()`` to a file just before it sleeps or waits) to the moment the caller holds the
exception (or the notice event). ``--load N`` runs N busy Python loops beside the benchmark.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch
import torch.distributed as dist

from notebook_launcher import LaunchTimeoutError, PartialState, WorkerStalledError
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.launch.planning.planner import plan_launch
from notebook_launcher.launch.supervision.runner import launch as run_plan
from notebook_launcher.ops import reduce
from notebook_launcher.protocol.events import RankQuiet

QUIET = "quiet-since"


def _quiet_from_now(folder: str) -> None:
    Path(folder, f"{QUIET}-{os.environ['RANK']}").write_text(repr(time.time()))


def _quiet_since(folder: str) -> float:
    return max(float(p.read_text()) for p in Path(folder).glob(f"{QUIET}-*"))


def barrier_waits_for_sleeper(folder):
    PartialState()
    _quiet_from_now(folder)
    if int(os.environ["RANK"]) == 1:
        time.sleep(3600)
    dist.barrier()


def reduce_waits_for_sleeper(folder):
    PartialState()
    _quiet_from_now(folder)
    if int(os.environ["RANK"]) == 1:
        time.sleep(3600)
    reduce(torch.ones(3), "sum")


def both_sleep(folder):
    PartialState()
    _quiet_from_now(folder)
    time.sleep(3600)


def computes_while_peer_waits(seconds):
    state = PartialState()
    if state.process_index == 0:
        end = time.monotonic() + seconds
        x = torch.randn(200, 200)
        while time.monotonic() < end:
            x = torch.tanh(x @ x)
    state.wait_for_everyone()
    return state.process_index


def fails_while_peer_sleeps(folder):
    PartialState()
    try:
        if int(os.environ["RANK"]) == 1:
            time.sleep(0.5)
            Path(folder, "failed-at").write_text(repr(time.time()))
            raise ValueError("rank 1 fails on purpose")
        time.sleep(3600)
    finally:
        Path(folder, f"finally-{os.environ['RANK']}").write_text("ran")


def sleeps_with_finally(folder):
    PartialState()
    try:
        time.sleep(3600)
    finally:
        Path(folder, f"finally-{os.environ['RANK']}").write_text("ran")


STALLS = {
    "barrier": barrier_waits_for_sleeper,
    "reduce": reduce_waits_for_sleeper,
    "both-sleep": both_sleep,
}


def stall_trial(function, stall_timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        try:
            launch(function, args=(folder,), num_processes=2, stall_timeout=stall_timeout)
            return {"outcome": "returned"}
        except WorkerStalledError as error:
            return {
                "outcome": "stalled",
                "after": time.time() - _quiet_since(folder),
                "ranks": list(error.ranks),
            }


def notice_trial(function, notice: float) -> dict:
    seen: list[float] = []

    def listen(event):
        if isinstance(event, RankQuiet) and not seen:
            seen.append(time.time())

    with tempfile.TemporaryDirectory() as folder:
        plan = plan_launch(
            num_processes=2, stall_notice=notice, stall_timeout=None, timeout=notice + 8, ui="none"
        )
        try:
            run_plan(function, (folder,), plan, listeners=(listen,))
        except LaunchTimeoutError:
            pass
        return {"after": seen[0] - _quiet_since(folder) if seen else None}


def busy_trial(seconds: float, stall_timeout: float) -> dict:
    started = time.monotonic()
    try:
        values = launch(
            computes_while_peer_waits,
            args=(seconds,),
            num_processes=2,
            stall_timeout=stall_timeout,
        ).values
        return {"outcome": "returned", "values": values, "took": time.monotonic() - started}
    except WorkerStalledError as error:
        return {"outcome": "stopped (wrongly)", "error": str(error).splitlines()[0]}


def stop_trial(kind: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        try:
            if kind == "peer-failed":
                launch(fails_while_peer_sleeps, args=(folder,), num_processes=2)
            else:
                launch(sleeps_with_finally, args=(folder,), num_processes=2, timeout=3)
        except (ValueError, LaunchTimeoutError):
            pass
        took = time.monotonic() - started
        if kind == "peer-failed":
            took = time.time() - float(Path(folder, "failed-at").read_text())
        else:
            took -= 3.0  # the stop, after the timeout fired
        finals = sorted(int(p.name.split("-")[1]) for p in Path(folder).glob("finally-*"))
        return {"stop": took, "finally ran on": finals}


ACCELERATE_STALL = textwrap.dedent(
    """
    import os, sys, time
    import torch.distributed as dist
    from accelerate import notebook_launcher
    def f():
        dist.init_process_group("gloo")
        if int(os.environ["RANK"]) == 1:
            time.sleep(3600)
        dist.barrier()
    notebook_launcher(f, num_processes=2, use_port=sys.argv[1])
    """
)


def accelerate_stall(bound: float) -> dict:
    """Accelerate's launcher on the barrier scenario: it has no stall detection; the job waits
    until gloo's own 30-minute timeout. Killed here after ``bound`` seconds."""
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return {"outcome": "accelerate not installed"}
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", ACCELERATE_STALL, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        process.wait(bound)
        return {"outcome": f"ended after {time.monotonic() - started:.1f} s"}
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
        return {"outcome": f"still hung after {bound:g} s (killed)"}


def _spin() -> None:
    while True:
        pass


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.1f} s, max {max(values):.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--stall-timeout", type=float, default=10.0)
    parser.add_argument("--busy-seconds", type=float, default=25.0)
    parser.add_argument("--load", type=int, default=0, help="busy loops to run beside")
    parser.add_argument("--accelerate-bound", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()

    hogs = [multiprocessing.get_context("spawn").Process(target=_spin) for _ in range(options.load)]
    for hog in hogs:
        hog.start()
    report: dict = {"stall_timeout": options.stall_timeout, "load": options.load}
    try:
        limit = options.stall_timeout
        for name, function in STALLS.items():
            trials = [stall_trial(function, limit) for _ in range(options.trials)]
            report[f"stall {name}"] = trials
            times = [t["after"] for t in trials if t["outcome"] == "stalled"]
            print(
                f"stall, {name:10s}: {len(times)}/{len(trials)} stalled; "
                f"{summary(times)}; ranks named {sorted({tuple(t['ranks']) for t in trials})}",
                flush=True,
            )
        notices = [notice_trial(barrier_waits_for_sleeper, limit) for _ in range(options.trials)]
        report["notice barrier"] = notices
        print(f"notice, barrier   : {summary([n['after'] for n in notices if n['after']])}")
        busy = [busy_trial(options.busy_seconds, limit) for _ in range(max(1, options.trials // 2))]
        report["busy"] = busy
        print(f"busy {options.busy_seconds:g} s        : {[b['outcome'] for b in busy]}")
        for kind in ("peer-failed", "timeout"):
            stops = [stop_trial(kind) for _ in range(options.trials)]
            report[f"stop {kind}"] = stops
            print(
                f"stop, {kind:11s}: {summary([s['stop'] for s in stops])}; finally ran on "
                f"{sorted({tuple(s['finally ran on']) for s in stops})}",
                flush=True,
            )
        report["accelerate barrier"] = accelerate_stall(options.accelerate_bound)
        print(f"accelerate barrier: {report['accelerate barrier']['outcome']}")
    finally:
        for hog in hogs:
            hog.kill()
            hog.join()
    if options.json:
        options.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
