"""Where a launch of N ranks spends its time, against bare ``torch.multiprocessing`` fork.

Outside a kernel (a plain interpreter), both lanes run the same job as the kernel benchmarks
(``PartialState()``, which joins a gloo group, and one ``all_reduce`` of one element). Every step is timestamped with the
machine's monotonic clock (one clock for every process) by wrapping the functions that make it;
the workers inherit the wrappers by fork and write their marks as they exit. The table is a
timeline: milliseconds from the call to the moment the *last* rank (or the kernel) passed each
milestone, median over the launches, the two lanes interleaved; then the CPU milliseconds the
launching process (all its threads) and the workers used per launch, which the load on the
machine changes much less.

    python benchmarks/launch_profile.py [--sizes 2,8] [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from launch_bench import free_port, launch_bare

now = time.monotonic
MARKS: list[tuple[str, float]] = []
TRACE_DIR = tempfile.mkdtemp(prefix="launch_profile-")


def mark(step: str) -> None:
    MARKS.append((step, now()))


def _wrap(owner, name, before=None, after=None):
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if before:
            mark(before)
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                mark(after)

    setattr(owner, name, wrapped)


def save_marks() -> None:
    with open(os.path.join(TRACE_DIR, f"{os.getpid()}"), "w") as file:
        file.writelines(f"{step} {when!r}\n" for step, when in MARKS)


def install() -> None:
    """Wrap the kernel's and the workers' steps (the workers inherit this by fork)."""
    from notebook_launcher.launch import api
    from notebook_launcher.launch.launchers.base import Launcher
    from notebook_launcher.launch.planning import entry
    from notebook_launcher.launch.rendezvous.local import LocalAttempt
    from notebook_launcher.launch.supervision import runner
    from notebook_launcher.launch.supervision.group import WorkerGroup
    from notebook_launcher.launch.supervision.supervisor import Supervisor
    from notebook_launcher.protocol.events import WorkerFinished
    from notebook_launcher.worker import bootstrap, exit_barrier

    _wrap(entry, "run_preflight", "k preflight", "k preflight done")
    _wrap(api, "create_view", None, "k view made")
    _wrap(runner, "open_rendezvous", "k store", "k store made")
    _wrap(Launcher, "start_group", "k forking", "k forked")
    _wrap(LocalAttempt, "workers_started", None, "k store serving")
    _wrap(Supervisor, "run", "k supervising", "k supervised")
    _wrap(WorkerGroup, "teardown", "k teardown", "k teardown done")
    _wrap(bootstrap, "shutdown_process_group", None, "w group destroyed")
    _wrap(exit_barrier, "wait_for_all_ranks", "w exit barrier", "w exit barrier done")
    original_apply = WorkerGroup.apply

    def apply(self, handle, event):
        if isinstance(event, WorkerFinished):
            mark("k result")
        original_apply(self, handle, event)

    WorkerGroup.apply = apply
    original_exited = WorkerGroup._exited

    def exited(self, handle):
        original_exited(self, handle)
        if handle.exited:
            mark(f"k exit seen {sum(h.exited for h in self.handles)}")

    WorkerGroup._exited = exited
    original_worker = bootstrap.run_worker

    def run_worker(*args, **kwargs):
        MARKS.clear()
        mark("w booting")
        try:
            original_worker(*args, **kwargs)
        finally:
            mark("w exiting")
            save_marks()

    bootstrap.run_worker = run_worker


def job():
    """The user-level job of the kernel benchmarks (``PartialState()``, one ``all_reduce``),
    with marks."""
    from notebook_launcher import PartialState

    if os.environ.get("NOTEBOOK_LAUNCHER_PROFILE_BARE"):
        MARKS.clear()
        mark("w booting")
    mark("w function")
    PartialState()
    mark("w group formed")
    value = torch.ones(1)
    dist.all_reduce(value)
    mark("w all_reduce done")
    mark("w function done")
    if os.environ.get("NOTEBOOK_LAUNCHER_PROFILE_BARE"):
        mark("w exiting")
        save_marks()
    return value.item()


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by this process (every thread) and by its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def timed(launch) -> dict:
    MARKS.clear()
    before = cpu_seconds()
    mark("k call")
    launch()
    mark("k returned")
    after = cpu_seconds()
    marks = dict(MARKS)
    marks["cpu: kernel"] = after[0] - before[0]
    marks["cpu: workers"] = after[1] - before[1]
    return marks


def run_ours(n: int) -> dict:
    from notebook_launcher import notebook_launcher

    port = free_port()
    return timed(lambda: notebook_launcher(job, num_processes=n, use_port=port, ui="none"))


def run_bare(n: int) -> dict:
    port = free_port()
    os.environ["NOTEBOOK_LAUNCHER_PROFILE_BARE"] = "1"
    try:
        return timed(lambda: launch_bare(job, (), n, port))
    finally:
        del os.environ["NOTEBOOK_LAUNCHER_PROFILE_BARE"]


def collect(kernel: dict) -> dict[str, float]:
    """The kernel's marks and, per worker mark, the last rank's; ms from the call."""
    start = kernel["k call"]
    times = {step: (when - start) * 1e3 for step, when in kernel.items() if step[0] == "k"}
    times.update({step: value * 1e3 for step, value in kernel.items() if step[0] == "c"})
    for name in os.listdir(TRACE_DIR):
        path = os.path.join(TRACE_DIR, name)
        with open(path) as file:
            for line in file:
                step, when = line.rsplit(" ", 1)
                value = (float(when) - start) * 1e3
                times[step] = max(times.get(step, value), value)
                first = f"{step} (first)"
                times[first] = min(times.get(first, value), value)
        os.unlink(path)
    return times


ORDER = (
    "k preflight",
    "k preflight done",
    "k view made",
    "k store",
    "k store made",
    "k forking",
    "w booting (first)",
    "k forked",
    "k store serving",
    "k supervising",
    "w booting",
    "w function (first)",
    "w function",
    "w group formed",
    "w all_reduce done",
    "w function done",
    "k result",
    "w exit barrier",
    "w exit barrier done",
    "w group destroyed",
    "w exiting",
    "k exit seen 1",
    "k exit seen 2",
    "k exit seen 8",
    "k supervised",
    "k teardown",
    "k teardown done",
    "k returned",
    "cpu: kernel",
    "cpu: workers",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8")
    parser.add_argument("--repeats", type=int, default=15)
    options = parser.parse_args()
    install()
    sizes = [int(s) for s in options.sizes.split(",")]
    lanes = {"ours": run_ours, "bare": run_bare}
    for n in sizes:  # untimed
        for run in lanes.values():
            run(n)
            collect({"k call": 0.0})
    samples = {(lane, n): [] for lane in lanes for n in sizes}
    for round_ in range(options.repeats):
        for n in sizes:
            for lane in list(lanes)[round_ % 2 :] + list(lanes)[: round_ % 2]:
                samples[lane, n].append(collect(lanes[lane](n)))
    print(
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; ms from the call until "
        "the last rank (or the kernel) passed each step, median of "
        f"{options.repeats} launches; '(first)': the first rank"
    )
    for n in sizes:
        print(f"\nN={n:<3} {'step':<24} {'ours':>8} {'bare':>8}")
        for step in ORDER:
            cells = []
            for lane in lanes:
                values = [s[step] for s in samples[lane, n] if step in s]
                cells.append(f"{statistics.median(values):8.1f}" if values else f"{'':>8}")
            print(f"      {step:<24} " + " ".join(cells))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
