"""Where the milliseconds of a warm ``session.run`` go, phase by phase, at N ranks.

Outside a kernel (a plain interpreter), one session per N. The kernel's and every worker's steps
are timestamped with the machine's monotonic clock (one clock for every process), by wrapping the
functions each step calls (installed before the workers fork, so they inherit the wrappers):

* ``pickle``   the kernel pickles ``(function, args, kwargs)``
* ``prepare``  the kernel prepares the call (its supervisor, the ranks' status) until it sends
* ``send``     the command reaches every rank's pipe
* ``deliver``  from the kernel's send to the last rank reading the command
* ``unpickle`` + ``work``  the last rank to run it: loading the call, running the function
* ``report``   the last rank: from the function's return until it has said it is idle
* ``notice``   from the last rank's last event to the kernel's supervisor returning the results
* ``finish``   the kernel loads the values and returns

"other" is the rest of the wall time of the call; ``cpu: kernel`` and ``cpu: workers`` the CPU
milliseconds per call of the kernel's process (every thread) and of all the workers. The work is ``PartialState()`` plus one
``all_reduce`` of one element (as in ``session_bench.py``), and ``nothing`` (returns 1) to show
the fixed cost.

    python benchmarks/call_profile.py [--sizes 2,8] [--calls 200] [--ui none]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from notebook_launcher import PartialState, Session
from notebook_launcher.launch.session import calls as session_calls
from notebook_launcher.launch.session import running as session_running
from notebook_launcher.protocol import channel as channel_module
from notebook_launcher.protocol.session_messages import RankIdle
from notebook_launcher.worker import session_loop

now = time.monotonic
MARKS: list[tuple[str, float]] = []  # this process's (step, time)
TRACE_DIR = tempfile.mkdtemp(prefix="call_profile-")


def _wrap(owner, name, before=None, after=None):
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if before:
            MARKS.append((before, now()))
        value = original(*args, **kwargs)
        if after:
            MARKS.append((after, now()))
        return value

    setattr(owner, name, wrapped)


def install() -> None:
    """Wrap the steps of a call, on both sides."""
    session_loop.profile_marks = MARKS
    _wrap(session_running, "_pickled", "k_pickle", "k_pickled")
    _wrap(session_running, "_send_all", "k_send", "k_sent")
    _wrap(session_calls.CallSupervisor, "run_call", None, "k_noticed")
    # Worker side: the command read, the call performed, the idle event sent.
    original_perform = session_loop._perform

    def perform(command, *rest):
        MARKS.append((f"w_taken {command.call}", now()))
        return original_perform(command, *rest)

    session_loop._perform = perform
    original_send = channel_module.EventChannel.send

    def send(self, event):
        original_send(self, event)
        for each in getattr(event, "events", (event,)):  # an EventBatch, or one event
            if isinstance(each, RankIdle) and each.call:
                MARKS.append((f"w_idle {each.call}", now()))

    channel_module.EventChannel.send = send
    original_serve = session_loop.serve

    def serve():
        try:
            original_serve()
        finally:
            _save()

    session_loop.serve = serve


def _save() -> None:
    rank = os.environ.get("RANK")
    if rank is None:
        return
    with open(os.path.join(TRACE_DIR, f"rank{rank}"), "a") as file:
        for step, when in MARKS:
            file.write(f"{step} {when!r}\n")
    MARKS.clear()


def traced_work(fn):
    def work():
        marks = session_loop.profile_marks  # the worker's own list (this module's travels by value)
        marks.append(("w_start", time.monotonic()))
        value = fn()
        marks.append(("w_end", time.monotonic()))
        return value

    return work


def all_reduced():
    PartialState()
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    return value.item()


def nothing():
    return 1


def workers_cpu(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` used so far (from /proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def measure(n: int, calls: int, ui: str) -> dict[str, dict[str, float]]:
    kernels, cpu = {}, {}
    session = Session(num_processes=n, ui=ui)
    pids = [handle.pid for handle in session._group.handles]
    try:
        for work in (nothing, all_reduced):
            fn = traced_work(work)
            for _ in range(20):
                session.run(fn)
            MARKS.clear()
            kernel = []
            before = time.process_time(), workers_cpu(pids)
            for _ in range(calls):
                start = now()
                session.run(fn)
                end = now()
                kernel.append(dict(MARKS, k_start=start, k_end=end, call=session.calls))
                MARKS.clear()
            cpu[work.__name__] = {
                "cpu: kernel": (time.process_time() - before[0]) / calls * 1e3,
                "cpu: workers": (workers_cpu(pids) - before[1]) / calls * 1e3,
            }
            kernels[work.__name__] = kernel
    finally:
        session.close()
    # The workers write their marks as they leave.
    return {name: phases(kernel, n) | cpu[name] for name, kernel in kernels.items()}


def phases(kernel: list[dict[str, float]], n: int) -> dict[str, float]:
    ranks = []
    for rank in range(n):
        with open(os.path.join(TRACE_DIR, f"rank{rank}")) as file:
            marks = [line.split() for line in file]
        calls: dict[int, dict[str, float]] = {}
        call = 0
        for step, *number, when in marks:
            if number:
                call = int(number[0])
            calls.setdefault(call, {})[step] = float(when)
        ranks.append(calls)
    rows: dict[str, list[float]] = {}
    for k in kernel:
        w = [r[k["call"]] for r in ranks]
        last = max(w, key=lambda c: c["w_idle"])
        sent = k["k_pickled"]
        pieces = {
            "pickle": k["k_pickled"] - k["k_pickle"],
            "prepare": k["k_send"] - sent,
            "send": k["k_sent"] - k["k_send"],
            "deliver": max(c["w_taken"] for c in w) - k["k_sent"],
            "unpickle": last["w_start"] - last["w_taken"],
            "work": last["w_end"] - last["w_start"],
            "report": last["w_idle"] - last["w_end"],
            "notice": k["k_noticed"] - last["w_idle"],
            "finish": k["k_end"] - k["k_noticed"],
            "total": k["k_end"] - k["k_start"],
        }
        pieces["other"] = pieces["total"] - sum(v for key, v in pieces.items() if key != "total")
        for key, value in pieces.items():
            rows.setdefault(key, []).append(value * 1e3)
    return {key: statistics.mean(values) for key, values in rows.items()} | {
        "total (median)": statistics.median(rows["total"])
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--ui", default="none")
    options = parser.parse_args()
    install()
    print(
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; ms, means over the calls (and the median total)",
        flush=True,
    )
    for n in (int(s) for s in options.sizes.split(",")):
        tables = measure(n, options.calls, options.ui)
        keys = list(next(iter(tables.values())))
        print(f"\nN={n} ui={options.ui}  " + "  ".join(f"{k:>8}" for k in tables))
        for key in keys:
            print(f"  {key:<22}" + "  ".join(f"{t[key]:8.3f}" for t in tables.values()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
