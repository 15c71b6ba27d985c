"""What the live panels cost: in the worker per metric logged, in a real kernel per second of a run.

1. ``log``: the median cost of one ``notebook_launcher.log({"loss": x}, step=i)`` call inside a
   launched worker (target <= 5 us), beside what users do without it: ``print`` a line per step
   (captured and shown by the launcher) and a bare ``list.append``; and ``log`` outside a launch.
2. ``kernel``: launches from a real Jupyter kernel (``kernel_bench.Kernel``, through
   jupyter_client, as a frontend sees it) at each N of ``--sizes`` (default 8 and 64), for
   ``--seconds`` each, in these lanes, their order rotating each of ``--repeats`` rounds:

   * ``light``: a sleep-heavy function, every 0.2 s each rank logs one metric and prints one
     line, with its defaults (widgets);
   * ``metrics``: the ranks together log ``--metrics-per-second`` values a second (bursts every
     10 ms), with widgets and again with ``ui="none"`` (the model only);
   * ``idle``: the ranks only sleep (widgets): the launcher's own supervision.

   For each: the widget (``comm_open``/``comm_msg``/``comm_close``) messages the client got per
   second of the launch and in its busiest second, against the frontend's budget (200 a second),
   the kernel's CPU time (all its threads, ``/proc``) as a share of one core, and whether every
   value logged reached the final model (target: nothing lost).

    python benchmarks/ui_bench.py [--calls 200000] [--sizes 8,64] [--seconds 10]
        [--metrics-per-second 8000] [--repeats 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from kernel_bench import Kernel
from scale_bench import BUDGET, WIDGET_TYPES
from session_bench import close_checked, kernel_cpu, result

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


# -- 2. in a real kernel ---------------------------------------------------------------------------


def light(seconds: float, per_second: int = 0) -> int:
    """A step every 0.2 s for ``seconds``: one metric logged, one line printed, then sleep."""
    start = time.monotonic()
    step = 0
    while step < seconds * 5:
        step += 1
        log({"loss": 1.0 / step}, step=step)
        print(f"step {step} done", flush=True)
        time.sleep(max(0.0, start + step * 0.2 - time.monotonic()))
    return step


def metrics(seconds: float, per_second: int) -> int:
    """Log ``per_second`` values a second, in bursts every 10 ms, for ``seconds`` (none: sleep)."""
    start = time.monotonic()
    step = 0
    for tick in range(int(seconds * 100)):
        due = (tick + 1) * per_second // 100
        while step < due:
            log({"loss": 1.0 / (step + 1)}, step=step)
            step += 1
        time.sleep(max(0.0, start + (tick + 1) * 0.01 - time.monotonic()))
    return step


LANES = (  # (name, ui): the function its ranks run
    ("light", "widgets"),
    ("metrics", "widgets"),
    ("metrics", "none"),
    ("idle", "widgets"),
)
LAUNCH = """
import json as _json, time as _time, ui_bench as _ub
from notebook_launcher import notebook_launcher as _launch
_start = _time.perf_counter()
_result = _launch(_ub.{function}, args=({seconds!r}, {rate!r}), num_processes={n}, ui={ui!r})
_wall = _time.perf_counter() - _start
_metrics = _result.panel.model.metrics
_in_model = _metrics["loss"].logged if "loss" in _metrics else 0
print("RESULT", _json.dumps({{"wall": _wall, "logged": sum(_result.values), "in_model": _in_model}}))
"""


def launch_cell(name: str, ui: str, n: int, seconds: float, total_rate: int) -> str:
    function = "light" if name == "light" else "metrics"
    rate = total_rate // n if name == "metrics" else 0
    return LAUNCH.format(function=function, seconds=seconds, rate=rate, n=n, ui=ui)


def in_kernel(kernel: Kernel, n: int, lane: tuple[str, str], options) -> dict:
    """One launch of ``lane`` at ``n`` ranks in ``kernel``: what the frontend got, what it cost."""
    name, ui = lane
    arrivals: list = []
    cpu, wall = kernel_cpu(kernel.pid), time.monotonic()
    cell = launch_cell(name, ui, n, options.seconds, options.rate)
    answer = result(kernel.run(cell, timeout=options.seconds + 300, arrivals=arrivals))
    cpu, wall = kernel_cpu(kernel.pid) - cpu, time.monotonic() - wall
    widget = [at for kind, at in arrivals if kind in WIDGET_TYPES]
    per_second: dict[int, int] = {}
    for at in widget:
        second = int(at - widget[0])
        per_second[second] = per_second.get(second, 0) + 1
    return {
        "n": n,
        "lane": name,
        "ui": ui,
        "launch_s": answer["wall"],
        "kernel_core_share": cpu / wall,
        "widget_messages": len(widget),
        "widget_messages_per_s": len(widget) / answer["wall"],
        "widget_busiest_second": max(per_second.values(), default=0),
        "values_logged": answer["logged"],
        "lost": answer["logged"] - answer["in_model"],
    }


def kernel_side(options) -> list[dict]:
    """Every lane at every N, ``options.repeats`` rounds, in one kernel."""
    os.environ["NOTEBOOK_LAUNCHER_MAX_PROCESSES"] = str(max(options.sizes))
    kernel = Kernel()
    runs = []
    try:
        for n in options.sizes:  # untimed: what the first launch at this N pays
            kernel.run(launch_cell("light", "widgets", n, 1.0, 0), timeout=300)
        for round_ in range(options.repeats):
            order = LANES[round_ % len(LANES) :] + LANES[: round_ % len(LANES)]
            for n in options.sizes:
                runs += [in_kernel(kernel, n, lane, options) for lane in order]
                print(f"   round {round_ + 1}, N={n} done", flush=True)
    finally:
        leftovers = close_checked(kernel)
    if leftovers:
        print(f"   processes still running after the kernel closed (killed): {leftovers}")
    return runs


def report(runs: list[dict], options) -> None:
    print(
        f"\n2. launches from a real kernel, {options.seconds:g} s each, medians of "
        f"{options.repeats}; light: a metric and a line per rank every 0.2 s; metrics: "
        f"{options.rate} values/s from all ranks together"
    )
    print(
        "     N  lane     ui        widget msg/s  busiest second  kernel CPU (share of a core)"
        "   logged   lost"
    )
    for n in options.sizes:
        for name, ui in LANES:
            got = [r for r in runs if (r["n"], r["lane"], r["ui"]) == (n, name, ui)]
            print(
                f"   {n:>3}  {name:<8} {ui:<9} {med(got, 'widget_messages_per_s'):12.1f}"
                f"{max(r['widget_busiest_second'] for r in got):16d}"
                f"{med(got, 'kernel_core_share'):20.1%}{'':10}"
                f"{min(r['values_logged'] for r in got):8d} {max(r['lost'] for r in got):6d}"
            )
    print(f"   the frontend's budget: {BUDGET} widget messages a second")


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--sizes", default="8,64", help="ranks of the launches in the kernel")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--metrics-per-second", dest="rate", type=int, default=8000, help="all ranks together"
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this file")
    options = parser.parse_args()
    options.sizes = [int(s) for s in options.sizes.split(",")]

    print(
        f"notebook_launcher {notebook_launcher.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    worker = worker_side(options.calls)
    print(f"\n1. cost of recording one metric in a worker ({options.calls} calls, median / p99)")
    for name, figures in worker.items():
        print(
            f"   {name:<32} {figures['median_ns'] / 1000:7.2f} us   "
            f"{figures['p99_ns'] / 1000:7.2f} us"
        )
    runs = kernel_side(options)
    report(runs, options)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"worker": worker, "kernel": runs}, out, indent=2)


if __name__ == "__main__":
    main()
