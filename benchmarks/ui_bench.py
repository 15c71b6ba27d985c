"""What the live panels cost: in the worker per metric logged, in the kernel per second of a run.

1. ``log``: the median cost of one ``notebook_launcher.log({"loss": x}, step=i)`` call inside a
   launched worker (target <= 5 us), beside what users do without it: ``print`` a line per step
   (captured and shown by the launcher) and a bare ``list.append``; and ``log`` outside a launch.
2. ``kernel``: 8 ranks each logging 1,000 metric values a second for ``--seconds`` seconds;
   the kernel's CPU time over the run (all its threads) as a share of one core (target <= 10 %),
   the widget messages the panels send per second (target <= 200), and whether every value
   reached the final model (target: nothing lost). The same run with ``ui="none"`` (the model
   only) and with no logging at all (the launcher's own supervision) shows where the cost goes.

Widget messages are counted by handing every widget a recording comm, as no frontend is attached.

    python benchmarks/ui_bench.py [--calls 200000] [--seconds 10] [--ranks 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import notebook_launcher
from notebook_launcher import log
from notebook_launcher import notebook_launcher as launch

# -- 1. the worker side ----------------------------------------------------------------------------


def time_calls(kind: str, calls: int) -> dict[str, float]:
    """Per-call nanoseconds of one way to record a metric, in this process."""
    clock = time.perf_counter_ns
    sink: list = []
    samples = []
    devnull = open(os.devnull, "w")  # noqa: SIM115
    for step in range(calls):
        value = 1.0 / (step + 1)
        if kind == "print":
            start = clock()
            print(f"step {step} loss {value:.5f}", file=devnull)
            samples.append(clock() - start)
        elif kind == "append":
            start = clock()
            sink.append((step, {"loss": value}))
            samples.append(clock() - start)
        else:
            start = clock()
            log({"loss": value}, step=step)
            samples.append(clock() - start)
    devnull.close()
    empty = []
    for _ in range(min(calls, 100_000)):
        start = clock()
        empty.append(clock() - start)
    overhead = statistics.median(empty)
    samples.sort()
    return {
        "median_ns": statistics.median(samples) - overhead,
        "p99_ns": samples[int(len(samples) * 0.99)] - overhead,
        "timer_ns": overhead,
    }


def in_worker(kind: str, calls: int) -> dict[str, float]:
    return time_calls(kind, calls)


def print_in_worker(calls: int) -> dict[str, float]:
    """``print`` to the worker's real stdout (the pipe the launcher reads), timed per call."""
    clock = time.perf_counter_ns
    samples = []
    for step in range(calls):
        start = clock()
        print(f"step {step} loss {1.0 / (step + 1):.5f}")
        samples.append(clock() - start)
    samples.sort()
    return {"median_ns": statistics.median(samples), "p99_ns": samples[int(len(samples) * 0.99)]}


def worker_side(calls: int) -> dict[str, dict[str, float]]:
    results = {}
    for kind in ("log", "append"):
        results[kind] = launch(in_worker, args=(kind, calls), num_processes=1, ui="none").main
    results["print (shown by the launcher)"] = launch(
        print_in_worker, args=(min(calls, 20_000),), num_processes=1, ui="none", output="none"
    ).main
    results["log outside a launch"] = time_calls("log", calls)
    return results


# -- 2. the kernel side ----------------------------------------------------------------------------


def paced_logging(seconds: float, per_second: int, enabled: bool) -> int:
    """Log ``per_second`` values a second, in bursts every 10 ms, for ``seconds``."""
    burst = per_second // 100
    start = time.monotonic()
    step = 0
    for tick in range(int(seconds * 100)):
        if enabled:
            for _ in range(burst):
                log({"loss": 1.0 / (step + 1)}, step=step)
                step += 1
        delay = start + (tick + 1) * 0.01 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return step


class CountingComm:
    """Stands in for a kernel comm and counts what the widgets send."""

    kernel = "counting"
    sent = 0

    def __init__(self, *args, **kwargs) -> None:
        self.comm_id = kwargs.get("comm_id") or f"comm-{id(self)}"

    def send(self, *args, **kwargs) -> None:
        CountingComm.sent += 1

    def open(self, *args, **kwargs) -> None:
        pass

    def on_msg(self, *args, **kwargs) -> None:
        pass

    def on_close(self, *args, **kwargs) -> None:
        pass

    def close(self, *args, **kwargs) -> None:
        pass


def kernel_side(ranks: int, seconds: float, per_second: int, ui: str, enabled: bool) -> dict:
    CountingComm.sent = 0
    cpu, wall = time.process_time(), time.monotonic()
    result = launch(paced_logging, args=(seconds, per_second, enabled), num_processes=ranks, ui=ui)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    model = result.panel.model
    expected = sum(result.values)
    logged = model.metrics["loss"].logged if "loss" in model.metrics else 0
    return {
        "ui": ui,
        "logging": enabled,
        "wall_s": wall,
        "kernel_cpu_s": cpu,
        "kernel_core_share": cpu / wall,
        "widget_messages": CountingComm.sent,
        "widget_messages_per_s": CountingComm.sent / wall,
        "values_logged": expected,
        "values_in_model": logged,
        "lost": expected - logged,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--per-second", type=int, default=1000)
    parser.add_argument("--json", help="also write the results to this file")
    options = parser.parse_args()

    import comm
    import ipywidgets  # noqa: F401  (imported once, as in a notebook, not inside a timed run)

    comm.create_comm = lambda *args, **kwargs: CountingComm(*args, **kwargs)

    print(
        f"notebook_launcher {notebook_launcher.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs"
    )
    worker = worker_side(options.calls)
    print(f"\n1. cost of recording one metric in a worker ({options.calls} calls, median / p99)")
    for name, figures in worker.items():
        print(
            f"   {name:<32} {figures['median_ns'] / 1000:7.2f} us   "
            f"{figures['p99_ns'] / 1000:7.2f} us"
        )

    runs = [
        kernel_side(options.ranks, options.seconds, options.per_second, "widgets", True),
        kernel_side(options.ranks, options.seconds, options.per_second, "none", True),
        kernel_side(options.ranks, options.seconds, options.per_second, "widgets", False),
    ]
    print(
        f"\n2. kernel with {options.ranks} ranks x {options.per_second} metrics/s for "
        f"{options.seconds:g} s"
    )
    print("   ui        logging   kernel CPU (share of a core)   widget msg/s   logged   lost")
    for run in runs:
        print(
            f"   {run['ui']:<9} {'yes' if run['logging'] else 'no':<9} "
            f"{run['kernel_cpu_s']:6.2f} s ({run['kernel_core_share']:6.1%})"
            f"{run['widget_messages_per_s']:17.1f}   {run['values_in_model']:7d}   "
            f"{run['lost']:4d}"
        )
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"worker": worker, "kernel": runs}, out, indent=2)


if __name__ == "__main__":
    main()
