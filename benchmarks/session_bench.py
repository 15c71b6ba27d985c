"""A call in a live Session against its floor and its peers, inside real Jupyter kernels.

Everything is timed inside the kernels (started through jupyter_client) with
``time.perf_counter()``, at each N of ``--sizes``, in one run. The work of a call: one
``all_reduce`` of ``torch.ones(1)`` (``all_reduce``), and the same after ``PartialState()``
(``state+all_reduce``); every value is checked (N on every rank). The lanes, each in a kernel of
its own:

* ``ours``     ``Session(num_processes=N, ui=ui)`` for ``ui`` in "none" and "widgets" (every
               call then shows its panel): the session's start, ``--warmup`` untimed calls of
               ``session.run(fn)``, ``--calls`` timed ones, ``close()``; per trial, also one
               launch of the same work (``notebook_launcher(fn, num_processes=N, ui=ui)``).
* ``before``   (with ``--baseline DIR``) the same, importing notebook_launcher from DIR.
* ``bare``     the floor: ``bare_pool.BarePool``, N ``torch.multiprocessing`` fork workers in one
               gloo group that run what they are sent over pipes (cloudpickle) and send back
               the value; no supervision, output capture, interrupts or panels.
* ``accelerate``  ``accelerate.notebook_launcher`` of the same work, one launch a call (it has
               no sessions: this is what a call costs its users).
* ``paired``   ``ours`` (``ui="none"``) and ``bare`` again, in one kernel, one call of each in
               turn, so that the load of the moment weighs on both alike.
* ``ipyparallel`` (when installed) ``ipp.Cluster(n=N)`` (its start timed), then ``%%px x = 1 + 1``
               and ``view.apply_sync(f)``; its engines form no process group, so that work has
               no collective.

Then, with the largest N: the kernel's CPU (all its threads, from ``/proc``) for
``--cpu-seconds`` seconds while the kernel idles without a session, while a session sits idle,
and while one call sleeps on every rank (ui "none" and "widgets"); and ``--push-mb`` MB pushed to
4 ranks and pulled back: the seconds, and the kernel's peak memory over its memory before, as a
multiple of the size (``VmHWM``, reset through ``/proc/self/clear_refs``). Every kernel is
closed with every process it started; a process still running afterwards is reported.

    python benchmarks/session_bench.py [--sizes 2,4,8] [--trials 3] [--calls 50] [--warmup 5]
        [--baseline DIR] [--cpu-seconds 10] [--push-mb 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import tempfile
import time

import psutil
from kernel_bench import Kernel, free_port

UIS = ("none", "widgets")
WORKS = ("all_reduce", "state+all_reduce")
CLUSTER_TIMEOUT = 120.0  # seconds for the ipyparallel cluster to start (its engines get 90)
HANG = 60.0  # seconds after which one of Accelerate's launches counts as hung

# Run first in every kernel.
SETUP = """
import json, time, torch

def timed_calls(call, calls):
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        value = call()
        seconds.append(time.perf_counter() - start)
    return seconds, value

def all_reduce():
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    return value.item()

def state_all_reduce():
    from notebook_launcher import PartialState

    PartialState()
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    return value.item()

WORKS = {"all_reduce": all_reduce, "state+all_reduce": state_all_reduce}
"""

OURS = "from notebook_launcher import Session, notebook_launcher"

SESSION = """
_start = time.perf_counter()
_session = Session(num_processes={n}, ui={ui!r})
_seconds = time.perf_counter() - _start
_got = {{"start": _seconds}}
try:
    for _name, _work in WORKS.items():
        _calls, _result = timed_calls(lambda: _session.run(_work), {calls})
        assert _result.values == [{n}.0] * {n}, _result.values
        _got[_name] = _calls
finally:
    _closing = time.perf_counter()
    _session.close()
    _got["close"] = time.perf_counter() - _closing
print("RESULT", json.dumps(_got))
"""

LAUNCH = """
_start = time.perf_counter()
_result = notebook_launcher(state_all_reduce, num_processes={n}, ui={ui!r}, use_port={port})
_seconds = time.perf_counter() - _start
assert _result.values == [{n}.0] * {n}, _result.values
print("RESULT", json.dumps({{"launch": _seconds}}))
"""

BARE = """
from bare_pool import BarePool
_start = time.perf_counter()
_pool = BarePool({n}, {port})
_got = {{"start": time.perf_counter() - _start}}
try:
    _calls, _values = timed_calls(lambda: _pool.run(all_reduce), {calls})
    assert _values == [{n}.0] * {n}, _values
    _got["all_reduce"] = _calls
finally:
    _pool.close()
print("RESULT", json.dumps(_got))
"""

# Ours and the floor in one kernel, their calls taken in turns: the machine's load of the moment
# weighs on both alike (the lanes above run in turns too, but a lane's calls in a row).
PAIRED = """
from bare_pool import BarePool
_pool = BarePool({n}, {port})
_session = Session(num_processes={n}, ui="none")
_got = {{"ours": [], "bare": []}}
_calls = {{"ours": lambda: _session.run(all_reduce).values, "bare": lambda: _pool.run(all_reduce)}}
try:
    for _ in range({calls}):
        for _lane, _call in _calls.items():
            _start = time.perf_counter()
            _values = _call()
            _got[_lane].append(time.perf_counter() - _start)
            assert _values == [{n}.0] * {n}, _values
finally:
    _session.close()
    _pool.close()
print("RESULT", json.dumps(_got))
"""

ACCELERATE = """
import accelerate
_start = time.perf_counter()
accelerate.notebook_launcher(state_all_reduce, num_processes={n}, use_port={port!r})
print("RESULT", json.dumps({{"launch": time.perf_counter() - _start}}))
"""

WIDGET_PROBE = """
import ipywidgets
ipywidgets.IntProgress(value=1, max=2).close()
"""

CLUSTER = """
import ipyparallel as ipp

_start = time.perf_counter()
cluster = ipp.Cluster(n={n}, profile_dir={profile!r}, engine_timeout=90, log_level=40)
rc = cluster.start_and_connect_sync(activate=True)
_seconds = time.perf_counter() - _start
view = rc[:]
view.block = True
assert len(rc.ids) == {n}, rc.ids

def _two():
    return 1 + 1

_px, _ = timed_calls(lambda: get_ipython().run_cell_magic("px", "", "x = 1 + 1"), {calls})
assert view["x"] == [2] * {n}, view["x"]
_apply, _values = timed_calls(lambda: view.apply_sync(_two), {calls})
assert _values == [2] * {n}, _values
rc.close()
cluster.stop_cluster_sync()
print("RESULT", json.dumps({{"start": _seconds, "%%px": _px, "apply_sync": _apply}}))
"""

# The kernel's CPU seconds, read by the client from /proc (every thread of the kernel).
CPU_IDLE_SESSION = """
_session = Session(num_processes={n}, ui="none")
_session.run(all_reduce)
"""
CPU_CALL = """
_session_ui = Session(num_processes={n}, ui={ui!r})
_session_ui.run(all_reduce)
_start = time.perf_counter()
_session_ui.run(time.sleep, {seconds})
print("RESULT", json.dumps({{"wall": time.perf_counter() - _start}}))
_session_ui.close()
"""

PUSH = """
import gc

def _status(key):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024

_pushed = torch.randn({elements})
_session = Session(num_processes=4, ui="none")
_session.run(all_reduce)
_got = {{}}
for _step in ("push", "pull"):
    gc.collect()
    with open("/proc/self/clear_refs", "w") as _refs:
        _refs.write("5")  # resets VmHWM to the current resident size
    _before = _status("VmRSS:")
    _start = time.perf_counter()
    if _step == "push":
        _session.push(x=_pushed)
    else:
        _pulled = _session.pull("x")
        assert all(torch.equal(p, _pushed) for p in _pulled)
    _got[_step] = time.perf_counter() - _start
    _got[_step + " growth"] = (_status("VmHWM:") - _before) / _pushed.nbytes
    _pulled = None
_session.close()
print("RESULT", json.dumps(_got))
"""


def result(printed: str) -> dict:
    return json.loads(printed.rsplit("RESULT", 1)[1])


def close_checked(kernel: Kernel) -> list[str]:
    """Close the kernel (it kills every process the kernel started); return any still running
    5 s later (then killed again), so the run can say what it left behind."""
    try:
        family = psutil.Process(kernel.pid).children(recursive=True) if kernel.pid else []
    except psutil.Error:
        family = []
    kernel.close()
    deadline = time.monotonic() + 5.0
    while True:
        left = []
        for proc in family:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
            except psutil.Error:
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return [f"pid {proc.pid}" for proc in left]


def widgets_usable(kernel: Kernel) -> str | None:
    """None if the kernel can create a widget, else why not."""
    try:
        kernel.run(WIDGET_PROBE)
    except RuntimeError as error:
        return f"the kernel cannot create widgets: {str(error).splitlines()[-1][:200]}"
    return None


def kernel_cpu(pid: int) -> float:
    """CPU seconds the process ``pid`` (all its threads) used so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


class Lanes:
    """The kernels of the run, and every sample they gave: ``samples[lane][n][key]``."""

    def __init__(self, options) -> None:
        self.options = options
        self.kernels: dict[str, Kernel] = {}
        self.samples: dict[str, dict[int, dict[str, list]]] = {}
        self.leftovers: list[str] = []
        self.notes: dict[str, str] = {}
        self.hung = 0  # Accelerate's launches that did not end within HANG seconds

    def kernel(self, lane: str) -> Kernel:
        if lane not in self.kernels:
            path = self.options.baseline if lane == "before" else None
            kernel = self.kernels[lane] = Kernel(os.path.abspath(path) if path else None)
            kernel.run(SETUP)
            if lane in ("ours", "before", "accelerate"):
                kernel.run(OURS)  # the work imports notebook_launcher: the workers inherit it
        return self.kernels[lane]

    def add(self, lane: str, n: int, got: dict) -> None:
        for key, value in got.items():
            values = value if isinstance(value, list) else [value]
            self.samples.setdefault(lane, {}).setdefault(n, {}).setdefault(key, []).extend(values)

    def close(self) -> None:
        for kernel in self.kernels.values():
            self.leftovers += close_checked(kernel)
        self.kernels.clear()


def ours_lanes(options) -> list[str]:
    return ["ours"] + (["before"] if options.baseline else [])


def run_sessions(lanes: Lanes, uis: list[str]) -> None:
    options = lanes.options
    calls = options.warmup + options.calls
    for n in options.sizes:  # untimed: the first launch and session of each N import what they need
        for lane in ours_lanes(options):
            for ui in uis:
                lanes.kernel(lane).run(LAUNCH.format(n=n, ui=ui, port=free_port()), 120)
                lanes.kernel(lane).run(SESSION.format(n=n, ui=ui, calls=1), 120)
    order = [(lane, ui) for lane in ours_lanes(options) for ui in uis] + [("bare", None)]
    order += [("accelerate", None)]
    for trial in range(options.trials):
        for n in options.sizes:
            rotated = order[trial % len(order) :] + order[: trial % len(order)]
            for lane, ui in rotated:
                kernel = lanes.kernel(lane)
                if lane == "bare":
                    got = result(kernel.run(BARE.format(n=n, port=free_port(), calls=calls), 120))
                    got["all_reduce"] = got["all_reduce"][options.warmup :]
                    lanes.add("bare", n, got)
                elif lane == "accelerate":
                    cell = ACCELERATE.format(n=n, port=str(free_port()))
                    try:
                        lanes.add("accelerate", n, result(kernel.run(cell, HANG)))
                    except TimeoutError:  # torch elastic's hang (see README): a fresh kernel
                        lanes.hung += 1
                        lanes.notes["accelerate"] = f"{lanes.hung} launches hung (not timed)"
                        lanes.leftovers += close_checked(lanes.kernels.pop("accelerate"))
                else:
                    cell = LAUNCH.format(n=n, ui=ui, port=free_port())
                    lanes.add(f"{lane} {ui}", n, result(kernel.run(cell, 120)))
                    got = result(kernel.run(SESSION.format(n=n, ui=ui, calls=calls), 300))
                    for work in WORKS:
                        got[f"{work} 1st"] = got[work][0]
                        got[work] = got[work][options.warmup :]
                    lanes.add(f"{lane} {ui}", n, got)


def run_paired(lanes: Lanes) -> None:
    options = lanes.options
    for n in options.sizes:
        cell = PAIRED.format(n=n, port=free_port(), calls=options.warmup + options.calls)
        got = result(lanes.kernel("ours").run(cell, 300))
        lanes.add("paired", n, {lane: calls[options.warmup :] for lane, calls in got.items()})


def run_ipyparallel(lanes: Lanes) -> None:
    options = lanes.options
    if importlib.util.find_spec("ipyparallel") is None:
        lanes.notes["ipyparallel"] = "not installed (pip install -e .[bench])"
        return
    kernel = lanes.kernel("ipyparallel")
    for n in options.sizes:
        with tempfile.TemporaryDirectory(prefix="session_bench-ipp-") as profile:
            cell = CLUSTER.format(n=n, profile=profile, calls=options.warmup + options.calls)
            try:
                got = result(kernel.run(cell, CLUSTER_TIMEOUT + 120))
            except (RuntimeError, TimeoutError) as error:
                lanes.notes["ipyparallel"] = f"failed: {str(error).splitlines()[-1][:200]}"
                return
            for key in ("%%px", "apply_sync"):
                got[key] = got[key][options.warmup :]
            lanes.add("ipyparallel", n, got)


def run_cpu(lanes: Lanes, uis: list[str]) -> None:
    """The kernel's CPU share: idle without a session, idle with one, during one long call."""
    options = lanes.options
    n, seconds = max(options.sizes), options.cpu_seconds
    for lane in ours_lanes(options):
        kernel = lanes.kernel(lane)
        got = {}
        before = kernel_cpu(kernel.pid)
        time.sleep(seconds)
        got["idle kernel"] = (kernel_cpu(kernel.pid) - before) / seconds
        kernel.run(CPU_IDLE_SESSION.format(n=n), 120)
        time.sleep(1.0)  # the session's start settles
        before = kernel_cpu(kernel.pid)
        time.sleep(seconds)
        got["idle session"] = (kernel_cpu(kernel.pid) - before) / seconds
        kernel.run("_session.close()")
        for ui in uis:
            before, start = kernel_cpu(kernel.pid), time.monotonic()
            kernel.run(CPU_CALL.format(n=n, ui=ui, seconds=seconds), seconds + 120)
            # Session(), its first call and close() are in the cell too: measured apart above.
            got[f"{seconds:g} s call, ui={ui}"] = (kernel_cpu(kernel.pid) - before) / (
                time.monotonic() - start
            )
        lanes.add(lane, n, got)


def run_push(lanes: Lanes) -> None:
    options = lanes.options
    elements = options.push_mb * 2**20 // 4
    for lane in ours_lanes(options):
        kernel = lanes.kernel(lane)
        lanes.add(lane, 4, result(kernel.run(PUSH.format(elements=elements), 600)))


def med(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] * 1e3
    return statistics.quantiles(values, n=10, method="inclusive")[-1] * 1e3


def report(lanes: Lanes, uis: list[str]) -> None:
    options, s = lanes.options, lanes.samples
    session_lanes = [f"{lane} {ui}" for lane in ours_lanes(options) for ui in uis]
    print(
        f"\nWarm calls in a kernel, milliseconds: median (p90) of {options.trials} x "
        f"{options.calls} calls after {options.warmup} untimed in each session"
    )
    columns = [*session_lanes, "bare", "ipp %%px", "ipp apply"]
    print(f"{'N':>3} {'work':<17}" + "".join(f"{c:>18}" for c in columns) + "  ours none/bare")
    for n in options.sizes:
        for work in WORKS:
            cells = []
            for column in columns:
                if column.startswith("ipp"):
                    key, lane = ("%%px" if "px" in column else "apply_sync"), "ipyparallel"
                else:
                    key, lane = work, column
                values = s.get(lane, {}).get(n, {}).get(key)
                if not values or (column.startswith(("bare", "ipp")) and work != "all_reduce"):
                    cells.append(f"{'':>18}")
                else:
                    cells.append(f"{med(values):9.2f} ({p90(values):6.2f})")
            ratio = ""
            if work == "all_reduce" and "bare" in s:
                ratio = f"{med(s['ours none'][n][work]) / med(s['bare'][n][work]):13.2f}x"
            print(f"{n:>3} {work:<17}" + "".join(cells) + "  " + ratio)
    print("  bare, ipyparallel: no PartialState; ipyparallel's work is 1 + 1 (no process group)")

    if "paired" in s:
        print(
            f"\nIn turns in one kernel, all_reduce, milliseconds: median (p90) of "
            f"{options.calls} calls each, ui=none"
        )
        for n in options.sizes:
            ours, bare = s["paired"][n]["ours"], s["paired"][n]["bare"]
            print(
                f"{n:>3} ours {med(ours):6.2f} ({p90(ours):6.2f})   bare {med(bare):6.2f} "
                f"({p90(bare):6.2f})   ours/bare {med(ours) / med(bare):5.2f}x"
            )

    print("\nStarting and launching, milliseconds (median); launch/run: a launch over a warm call")
    header = f"{'N':>3} {'lane':<16}{'Session()':>11}{'close':>9}{'launch':>9}{'launch/run':>12}"
    print(header + f"{'accelerate':>12}{'ipp start':>11}{'bare start':>12}")
    for n in options.sizes:
        for lane in session_lanes:
            got = s[lane][n]
            ratio = statistics.median(got["launch"]) / statistics.median(got["state+all_reduce"])
            extra = ""
            if lane == session_lanes[0]:
                acc = s.get("accelerate", {}).get(n, {}).get("launch")
                ipp = s.get("ipyparallel", {}).get(n, {}).get("start")
                bare = s.get("bare", {}).get(n, {}).get("start")
                extra = "".join(f"{med(v):>12.1f}" if v else f"{'':>12}" for v in (acc, ipp, bare))
            print(
                f"{n:>3} {lane:<16}{med(got['start']):11.1f}{med(got['close']):9.1f}"
                f"{med(got['launch']):9.1f}{ratio:11.1f}x{extra}"
            )
    for lane, note in lanes.notes.items():
        print(f"  {lane}: {note}")

    n = max(options.sizes)
    print(f"\nKernel CPU, share of one core (N={n}), over {options.cpu_seconds:g} s")
    for lane in ours_lanes(options):
        got = s[lane][n]
        cpu = {k: v for k, v in got.items() if k.startswith(("idle", f"{options.cpu_seconds:g} s"))}
        print(f"  {lane:<8}" + "  ".join(f"{k}: {100 * v[0]:.2f} %" for k, v in cpu.items()))
    print(f"\n{options.push_mb} MB pushed to 4 ranks, then pulled back (seconds; kernel growth)")
    for lane in ours_lanes(options):
        got = s[lane][4]
        print(
            f"  {lane:<8} push {got['push'][0]:.3f} s, growth {got['push growth'][0]:.2f}x; "
            f"pull {got['pull'][0]:.3f} s, growth {got['pull growth'][0]:.2f}x (4 values kept)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,8")
    parser.add_argument("--trials", type=int, default=3, help="sessions and launches per N")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per session")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before them")
    parser.add_argument("--baseline", help="another checkout: its notebook_launcher as 'before'")
    parser.add_argument("--cpu-seconds", type=float, default=10.0)
    parser.add_argument("--push-mb", type=int, default=200)
    parser.add_argument("--json", help="write every sample here")
    options = parser.parse_args()
    options.sizes = [int(x) for x in options.sizes.split(",")]
    if options.trials < 1 or options.calls < 1 or options.warmup < 0:
        parser.error("--trials and --calls must be at least 1, --warmup at least 0")
    print(f"load average {os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} CPUs", flush=True)
    lanes = Lanes(options)
    try:
        reason = widgets_usable(lanes.kernel("ours"))
        uis = [ui for ui in UIS if ui != "widgets" or reason is None]
        if reason:
            lanes.notes["widgets"] = reason
        run_sessions(lanes, uis)
        run_paired(lanes)
        run_ipyparallel(lanes)
        run_cpu(lanes, uis)
        run_push(lanes)
    finally:
        lanes.close()
    report(lanes, uis)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if lanes.leftovers:
        print(f"processes still running after their kernel closed (killed): {lanes.leftovers}")
    if options.json:
        with open(options.json, "w") as f:
            json.dump({"options": vars(options), "samples": lanes.samples}, f, indent=1)


if __name__ == "__main__":
    main()
