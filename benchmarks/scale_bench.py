"""How the cost of a launch, a session call and a long call grows with N, in real Jupyter kernels.

At every N of ``--sizes``, in one run, two kernels (``kernel_bench.Kernel``): ``ours`` and
``bare``, each timing its cells inside the kernel with ``time.perf_counter()``:

* **launch**: ``kernel_bench``'s launch cell (``PartialState()`` and one ``all_reduce`` of one
  element, ``--job`` as there), ours with its defaults (widgets in a kernel) against bare
  ``torch.multiprocessing`` fork of the same job; one untimed launch per N, then ``--repeats``
  of each, the lanes' order alternating.
* **call**: ``Session(num_processes=N)`` with its defaults, ``--calls`` timed ``run`` of a
  function that returns 1, after one untimed; the floor is ``bare_pool.BarePool``: N fork
  workers in one gloo group that answer a pickled function sent down a pipe.
* **long call**: one call of ``--call-seconds`` in the same session (pool): every rank sleeps in
  steps of 0.5 s, logs a metric at each step and prints a line (the same on every rank) every
  second. Measured from the client: the kernel's CPU (all its threads, ``/proc``) as a share of
  one core over the call, and the widget (``comm_*``) messages the frontend got per second.

Ratios are ours over bare. ``NOTEBOOK_LAUNCHER_MAX_PROCESSES`` is raised for the kernels, as 64
CPU ranks on a small machine are beyond the default cap.

    python benchmarks/scale_bench.py [--sizes 2,4,8,16,32,64] [--repeats 3] [--calls 10]
        [--call-seconds 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import kernel_bench
from kernel_bench import free_port, launch_cell, ready_kernel, seconds
from session_bench import close_checked, kernel_cpu, result

LANES = ("ours", "bare")
WIDGET_TYPES = ("comm_open", "comm_msg", "comm_close")
BUDGET = 200  # widget messages a second the frontend should get at most (docs/benchmarks.md)

SETUP = """
import json, time
from bare_pool import BarePool

def nothing():
    return 1

def chatty(seconds):
    import time
    from notebook_launcher import log
    step, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(max(0.0, min(0.5, end - time.monotonic())))
        step += 1
        log({"loss": 1.0 / step}, step=step)
        if step % 2 == 0:
            print(f"step {step} done", flush=True)
    return step
"""

OPEN = {
    "ours": "from notebook_launcher import Session\n_pool = Session(num_processes={n})",
    "bare": "_pool = BarePool({n}, {port})",
}
RUN = {
    "ours": "_pool.run({function}{args}).values",
    "bare": "_pool.run({function}{args})",
}
CALLS = """
_start = time.perf_counter()
{open_}
_opened = time.perf_counter() - _start
assert {first} == [1] * {n}
_calls = []
for _ in range({calls}):
    _start = time.perf_counter()
    _values = {each}
    _calls.append(time.perf_counter() - _start)
assert _values == [1] * {n}, _values
print("RESULT", json.dumps({{"start": _opened, "calls": _calls}}))
"""
LONG = """
_start = time.perf_counter()
_values = {call}
print("RESULT", json.dumps({{"wall": time.perf_counter() - _start, "steps": min(_values)}}))
"""
CLOSE = "_pool.close()"


def run_launches(kernels: dict, n: int, repeats: int, samples: dict) -> None:
    for round_ in range(repeats):
        for lane in LANES[round_ % 2 :] + LANES[: round_ % 2]:
            took = seconds(kernels[lane].run(launch_cell(lane, n), timeout=300))
            samples[lane, n]["launch"].append(took)


def run_session(kernel, lane: str, n: int, options, got: dict) -> None:
    """Open a session (pool), time its calls and one long call, close it."""
    cell = CALLS.format(
        open_=OPEN[lane].format(n=n, port=free_port()),
        first=RUN[lane].format(function="nothing", args=""),
        each=RUN[lane].format(function="nothing", args=""),
        n=n,
        calls=options.calls,
    )
    try:
        calls = result(kernel.run(cell, timeout=600))
        got["start"].append(calls["start"])
        got["call"].extend(calls["calls"])
        counts: dict[str, int] = {}
        long_call = LONG.format(
            call=RUN[lane].format(function="chatty", args=f", {options.call_seconds!r}")
        )
        before, start = kernel_cpu(kernel.pid), time.monotonic()
        answer = result(kernel.run(long_call, timeout=options.call_seconds + 300, counts=counts))
        wall = time.monotonic() - start
        got["long cpu"].append((kernel_cpu(kernel.pid) - before) / wall)
        got["long wall"].append(answer["wall"])
        widget = sum(counts.get(kind, 0) for kind in WIDGET_TYPES)
        got["widget msg/s"].append(widget / wall)
        got["iopub msg/s"].append(sum(counts.values()) / wall)
    finally:
        kernel.run(CLOSE, timeout=120)


def med(values: list[float]) -> float:
    return statistics.median(values)


def report(samples: dict, sizes: list[int], options) -> None:
    print(
        f"\nmedians; launch: {options.repeats} per lane and N; call: {options.calls} calls of a "
        f"function returning 1 in a warm session (bare: a pool answering a pipe); long call: "
        f"{options.call_seconds:g} s, kernel CPU as % of one core"
    )
    head = (
        f"{'N':>3} {'launch ours':>12} {'bare':>7} {'ratio':>6} | {'call ours':>10} {'bare':>7} "
        f"{'ratio':>6} | {'start ours':>10} {'bare':>6} | {'CPU ours':>9} {'bare':>6} | "
        f"{'widget msg/s':>12} {'iopub msg/s':>11}"
    )
    print(head)
    for n in sizes:
        ours, bare = samples["ours", n], samples["bare", n]
        launch = med(ours["launch"]), med(bare["launch"])
        call = med(ours["call"]) * 1e3, med(bare["call"]) * 1e3
        print(
            f"{n:>3} {launch[0]:10.3f} s {launch[1]:7.3f} {launch[0] / launch[1]:5.2f}x | "
            f"{call[0]:7.2f} ms {call[1]:7.2f} {call[0] / call[1]:5.2f}x | "
            f"{med(ours['start']):8.2f} s {med(bare['start']):6.2f} | "
            f"{100 * med(ours['long cpu']):7.2f} % {100 * med(bare['long cpu']):5.2f} | "
            f"{med(ours['widget msg/s']):12.1f} {med(ours['iopub msg/s']):11.1f}"
        )
    print(f"  widget budget: {BUDGET} msg/s; bare sends no widget messages")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,8,16,32,64")
    parser.add_argument("--repeats", type=int, default=3, help="timed launches per lane and N")
    parser.add_argument("--calls", type=int, default=10, help="timed calls per session")
    parser.add_argument("--call-seconds", type=float, default=10.0, help="the long call")
    parser.add_argument("--sessions", type=int, default=1, help="sessions (pools) per lane and N")
    parser.add_argument("--job", choices=("partial", "trivial"), default="partial")
    parser.add_argument("--json", help="write every sample here")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    if min(options.repeats, options.calls, options.sessions) < 1 or min(sizes) < 1:
        parser.error("--repeats, --calls, --sessions and every size must be at least 1")
    if options.call_seconds <= 0:
        parser.error("--call-seconds must be positive")
    kernel_bench.JOB[0] = options.job
    os.environ["NOTEBOOK_LAUNCHER_MAX_PROCESSES"] = str(max(sizes))
    print(
        f"load average {os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} CPUs, "
        f"job {options.job}, sizes {sizes}",
        flush=True,
    )
    keys = ("launch", "call", "start", "long cpu", "long wall", "widget msg/s", "iopub msg/s")
    samples = {(lane, n): {key: [] for key in keys} for lane in LANES for n in sizes}
    kernels = {}
    leftovers: list[str] = []
    try:
        for lane in LANES:
            kernels[lane] = ready_kernel(lane, sizes[:1])
            kernels[lane].run(SETUP)
        for n in sizes:
            for lane in LANES:  # untimed: what the first launch at this N pays
                kernels[lane].run(launch_cell(lane, n), timeout=300)
            run_launches(kernels, n, options.repeats, samples)
            for session in range(options.sessions):
                for lane in LANES[session % 2 :] + LANES[: session % 2]:
                    run_session(kernels[lane], lane, n, options, samples[lane, n])
            print(f"  N={n} done, load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for kernel in kernels.values():
            leftovers += close_checked(kernel)
    report(samples, sizes, options)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if leftovers:
        print(f"processes still running after their kernel closed (killed): {leftovers}")
    if options.json:
        with open(options.json, "w") as f:
            json.dump({f"{lane}:{n}": got for (lane, n), got in samples.items()}, f, indent=1)


if __name__ == "__main__":
    main()
