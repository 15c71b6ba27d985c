"""A call in a live Session against a whole launch, inside a real Jupyter kernel (jupyter_client).

The work is the same everywhere: ``PartialState()`` and one ``all_reduce`` of ``torch.ones(1)``
on 2 ranks, the value returned (checked: 2.0 on every rank). One kernel runs, per trial and for
each ``ui`` setting in turn (order rotating), two cells:

* ``launch``   ``notebook_launcher(fn, num_processes=2, ui=ui)``: fork, rendezvous, the group
               formed, the call, teardown; one timed call per trial.
* ``session``  ``Session(num_processes=2, ui=ui)`` (timed: the start cost), ``--warmup``
               untimed calls of ``session.run(fn)``, then ``--calls`` timed ones, then
               ``session.close()``. The timed calls of every trial are pooled: median and p90;
               each session's first call is reported apart.

``ui="widgets"`` gives every call and launch its panel in the cell; it is measured when the
kernel can create widgets. Everything is timed inside the kernel with ``time.perf_counter()``;
one untimed launch and one untimed session per ``ui`` come first (the first launch imports
``torch._dynamo``).

For scale, IPython Parallel (when installed; it is no dependency of this project): a second
kernel starts a local cluster of 2 engines (``ipp.Cluster``, timed), then times ``%%px x = 1 + 1``
and ``view.apply_sync(f)`` (f returns 1 + 1) the same way. Its engines form no process group, so
that work has no collective; the cluster is stopped at the end.

    python benchmarks/session_bench.py [--trials 5] [--calls 50] [--warmup 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time

import psutil
from kernel_bench import Kernel

UIS = ("none", "widgets")
TARGET = 10.0  # launch / session.run, at least
CLUSTER_TIMEOUT = 90.0  # seconds for the ipyparallel cluster to start (its engines get 60)

# Run first in every kernel: the timing loop of the cells below.
TIMING = """
import json, time

def timed_calls(call, calls):
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        value = call()
        seconds.append(time.perf_counter() - start)
    return seconds, value
"""

SETUP = """
import torch
from notebook_launcher import PartialState, Session, notebook_launcher

def all_reduced():
    PartialState()
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    return value.item()
"""

LAUNCH = """
_start = time.perf_counter()
_result = notebook_launcher(all_reduced, num_processes=2, ui={ui!r})
_seconds = time.perf_counter() - _start
assert _result.values == [2.0, 2.0], _result.values
print("RESULT", json.dumps({{"launch": _seconds}}))
"""

SESSION = """
_start = time.perf_counter()
_session = Session(num_processes=2, ui={ui!r})
_seconds = time.perf_counter() - _start
try:
    _calls, _result = timed_calls(lambda: _session.run(all_reduced), {calls})
    assert _result.values == [2.0, 2.0], _result.values
finally:
    _closing = time.perf_counter()
    _session.close()
    _closed = time.perf_counter() - _closing
print("RESULT", json.dumps({{"start": _seconds, "calls": _calls, "close": _closed}}))
"""

WIDGET_PROBE = """
import ipywidgets
ipywidgets.IntProgress(value=1, max=2).close()
"""

CLUSTER = """
import ipyparallel as ipp

_start = time.perf_counter()
cluster = ipp.Cluster(n=2, profile_dir={profile!r}, engine_timeout=60, log_level=40)
rc = cluster.start_and_connect_sync(activate=True)
_seconds = time.perf_counter() - _start
view = rc[:]
view.block = True
assert len(rc.ids) == 2, rc.ids
print("RESULT", json.dumps({{"start": _seconds}}))
"""

CLUSTER_CALLS = """
def _two():
    return 1 + 1

_px, _ = timed_calls(lambda: get_ipython().run_cell_magic("px", "", "x = 1 + 1"), {calls})
assert view["x"] == [2, 2], view["x"]
_apply, _values = timed_calls(lambda: view.apply_sync(_two), {calls})
assert _values == [2, 2], _values
print("RESULT", json.dumps({{"px": _px, "apply": _apply}}))
"""

CLUSTER_STOP = "rc.close()\ncluster.stop_cluster_sync()"


def result(printed: str) -> dict:
    return json.loads(printed.rsplit("RESULT", 1)[1])


def close_checked(kernel: Kernel) -> list[str]:
    """Close the kernel (it kills every process the kernel started); return any still running
    5 s later (then killed again), so the run can say what it left behind."""
    process = getattr(kernel.km.provisioner, "process", None)
    try:
        family = psutil.Process(process.pid).children(recursive=True) if process else []
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


def session_and_launch(trials: int, warmup: int, calls: int, skipped: dict, leftovers: list):
    samples = {ui: {"launch": [], "start": [], "first": [], "calls": [], "close": []} for ui in UIS}
    kernel = Kernel()
    try:
        kernel.run(TIMING + SETUP)
        reason = widgets_usable(kernel)
        uis = list(UIS)
        if reason:
            skipped["widgets"] = reason
            uis.remove("widgets")
        # Untimed: the first launch imports torch._dynamo, the first session and the first
        # panel their own modules.
        for ui in uis:
            kernel.run(LAUNCH.format(ui=ui), timeout=60)
            kernel.run(SESSION.format(ui=ui, calls=1), timeout=60)
        for trial in range(trials):
            for ui in uis[trial % len(uis) :] + uis[: trial % len(uis)]:
                samples[ui]["launch"].append(result(kernel.run(LAUNCH.format(ui=ui)))["launch"])
                got = result(kernel.run(SESSION.format(ui=ui, calls=warmup + calls)))
                for key in ("start", "close"):
                    samples[ui][key].append(got[key])
                samples[ui]["first"].append(got["calls"][0])
                samples[ui]["calls"] += got["calls"][warmup:]
    finally:
        leftovers += close_checked(kernel)
    return {ui: s for ui, s in samples.items() if ui not in skipped}


def ipyparallel(warmup: int, calls: int, leftovers: list) -> dict | str:
    """The %%px and apply_sync samples and the cluster's start time, or why there are none."""
    if importlib.util.find_spec("ipyparallel") is None:
        return "ipyparallel is not installed (pip install ipyparallel to measure it)"
    with tempfile.TemporaryDirectory(prefix="session_bench-ipp-") as profile:
        kernel = Kernel()
        started = False
        try:
            try:
                got = result(
                    kernel.run(TIMING + CLUSTER.format(profile=profile), timeout=CLUSTER_TIMEOUT)
                )
                started = True
                timed = result(kernel.run(CLUSTER_CALLS.format(calls=warmup + calls), 120))
                for key, seconds in timed.items():
                    got[key], got[f"{key}_first"] = seconds[warmup:], seconds[0]
            except (RuntimeError, TimeoutError) as error:
                return f"the ipyparallel cluster failed: {str(error).splitlines()[-1][:200]}"
            return got
        finally:
            if started:
                try:
                    kernel.run(CLUSTER_STOP, timeout=30)
                except (RuntimeError, TimeoutError):
                    pass  # its processes are the kernel's children: killed with it below
            leftovers += close_checked(kernel)


def ms(seconds: list[float]) -> tuple[float, float]:
    """Median and p90, in milliseconds."""
    if len(seconds) < 2:
        return seconds[0] * 1e3, seconds[0] * 1e3
    p90 = statistics.quantiles(seconds, n=10, method="inclusive")[-1]
    return statistics.median(seconds) * 1e3, p90 * 1e3


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def report(samples: dict, ipp: dict | str, skipped: dict, options) -> None:
    print(
        f"\nN=2 in a Jupyter kernel, PartialState() + all_reduce of one element, milliseconds.\n"
        f"run: session.run median / p90 of {options.trials} x {options.calls} calls (after "
        f"{options.warmup} untimed in each session); 1st: a session's first call; launch, "
        f"Session(), close: median of {options.trials}"
    )
    header = (
        f"{'ui':<8} {'run med':>8} {'run p90':>8} {'1st':>6} {'launch':>8} {'launch/run':>11} "
        f"{'Session()':>10} {'start/launch':>13} {'close':>7}"
    )
    print(header)
    print("-" * len(header))
    verdicts = []
    for ui in UIS:
        if ui not in samples:
            print(f"{ui:<8} skipped: {skipped[ui]}")
            continue
        s = samples[ui]
        run_med, run_p90 = ms(s["calls"])
        launch, start = median_ms(s["launch"]), median_ms(s["start"])
        print(
            f"{ui:<8} {run_med:8.2f} {run_p90:8.2f} {median_ms(s['first']):6.1f} {launch:8.1f} "
            f"{launch / run_med:10.1f}x {start:10.1f} {start / launch:12.2f}x "
            f"{median_ms(s['close']):7.1f}"
        )
        ratio = launch / run_med
        verdicts.append(f"{ui} {'met' if ratio >= TARGET else 'NOT met'} ({ratio:.1f}x)")
    print(f"target: session.run at least {TARGET:g}x faster than a launch: {', '.join(verdicts)}")

    print("\nIPython Parallel, 2 engines, in its own kernel, milliseconds (same counts)")
    if isinstance(ipp, str):
        print(f"  skipped: {ipp}")
        return
    for key, what in (("px", "%%px x = 1 + 1"), ("apply", "view.apply_sync(f)")):
        med, p90 = ms(ipp[key])
        print(
            f"  {what:<20} median {med:7.2f}  p90 {p90:7.2f}  1st {ipp[f'{key}_first'] * 1e3:6.1f}"
        )
    print(f"  {'cluster start':<20} {ipp['start'] * 1e3:.1f}")
    if "none" in samples:
        run, start = ms(samples["none"]["calls"])[0], median_ms(samples["none"]["start"])
        print(
            f"  against the session (ui=none): %%px / session.run {ms(ipp['px'])[0] / run:.2f}x, "
            f"cluster start / Session() {ipp['start'] * 1e3 / start:.0f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="launches and sessions per ui")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per session")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before them")
    parser.add_argument("--json", help="write every sample here")
    options = parser.parse_args()
    if options.trials < 1 or options.calls < 1 or options.warmup < 0:
        parser.error("--trials and --calls must be at least 1, --warmup at least 0")
    skipped: dict[str, str] = {}
    leftovers: list[str] = []
    samples = session_and_launch(options.trials, options.warmup, options.calls, skipped, leftovers)
    ipp = ipyparallel(options.warmup, options.calls, leftovers)
    report(samples, ipp, skipped, options)
    if leftovers:
        print(f"processes still running after their kernel closed (killed): {leftovers}")
    if options.json:
        with open(options.json, "w") as f:
            json.dump(
                {"options": vars(options), "samples": samples, "ipyparallel": ipp}, f, indent=1
            )


if __name__ == "__main__":
    main()
