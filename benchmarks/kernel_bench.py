"""Launch latency where users launch: inside a real Jupyter kernel (ipykernel via jupyter_client).

The same three launchers as ``launch_bench.py``, but each launcher lives in an ipykernel of its own,
and every launch is a cell executed in it, timed inside the kernel with ``time.perf_counter()``
around the call. The job (``--job``): ``partial`` (default: ``PartialState()`` and one
``all_reduce`` of one element, the user-level job) or ``trivial`` (``launch_bench.py``'s:
``init_process_group``, the ``all_reduce``, ``destroy_process_group``). The lanes:

* ``ours``        ``notebook_launcher.notebook_launcher`` with its defaults (widgets in a kernel)
* ``accelerate``  ``accelerate.notebook_launcher``
* ``bare``        ``torch.multiprocessing`` fork, N x ``Process`` + a fail-fast join loop: the floor
* ``before``      (with ``--baseline DIR``) ``ours`` imported from another checkout, DIR: the
                  same run compares two versions

Warm launches: one kernel per launcher, one untimed launch per N, then ``--repeats`` rounds, each
launching every N with every launcher, the launchers' order rotating; medians and ratios to bare.
First launches: for every launcher and ``--first`` times, a fresh kernel imports the launcher
and launches N=2 either at once (same cell) or after ``--settle`` seconds.

Output (``--lines L``, default 20000; 0 skips it): 2 ranks each print L numbered lines, a launch
of ``ours`` (and ``before``) with its defaults in a kernel of its own; the client reads every
stream message of the cell and checks that each rank's lines all arrived, in order, labelled;
lines per second is 2 L over the launch's time in the kernel. The floor: the kernel prints the
same 2 L lines itself. The panel's last line of each rank (its "latest line" column) must be
that rank's last line.

    python benchmarks/kernel_bench.py [--repeats 5] [--sizes 1,2,4,8] [--first 3] [--lines 20000]
        [--baseline DIR] [--without accelerate] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import time

import psutil
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHERS = ["ours", "accelerate", "bare"]  # "before" joins with --baseline
IMPORTS = {
    "ours": "import notebook_launcher",
    "accelerate": "import torch, accelerate, notebook_launcher",
    "bare": "import torch, torch.multiprocessing, notebook_launcher",
}
PATHS: dict[str, str] = {}  # lane -> the checkout its kernel imports notebook_launcher from
JOB = ["partial"]  # the launch_bench function every lane launches (--job)
CELL_TIMEOUT = 30.0


class _ThisPython(KernelSpecManager):
    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="this Python",
            language="python",
        )


class Kernel:
    """One ipykernel and a client; ``run`` executes a cell and returns what it printed.

    ``path``: the checkout the kernel imports ``notebook_launcher`` from (default: as this
    process does)."""

    def __init__(self, path: str | None = None) -> None:
        self.km = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisPython())
        # The kernel's own start-up warnings would bury the tables; errors come back over IOPub.
        self.km.start_kernel(
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, (HERE, path or os.environ.get("PYTHONPATH")))
                ),
            },
            stderr=subprocess.DEVNULL,
        )
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    @property
    def pid(self) -> int | None:
        process = getattr(self.km.provisioner, "process", None)
        return process.pid if process else None

    def run(
        self,
        code: str,
        timeout: float = CELL_TIMEOUT,
        streams: list | None = None,
        counts: dict | None = None,
        arrivals: list | None = None,
    ) -> str:
        """Run ``code``; what it printed on stdout. ``streams`` gets every stream message's
        (name, text) in order; ``counts`` counts the cell's IOPub messages by type;
        ``arrivals`` gets each one's (type, ``time.monotonic()`` when the client read it)."""
        out = []
        for kind, content in self.replies(self.kc.execute(code), timeout, code):
            if counts is not None:
                counts[kind] = counts.get(kind, 0) + 1
            if arrivals is not None:
                arrivals.append((kind, time.monotonic()))
            if kind == "stream" and streams is not None:
                streams.append((content["name"], content["text"]))
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                raise RuntimeError("\n".join(content["traceback"]))
        return "".join(out)

    def replies(self, msg_id: str, timeout: float, code: str = ""):
        """The (type, content) of each IOPub message of request ``msg_id``, until the kernel
        is idle again (that status message included); TimeoutError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"cell did not finish in {timeout} s: {code[:80]!r}")
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            yield msg["msg_type"], msg["content"]
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return

    def close(self) -> None:
        """Shut the kernel down with every process it started (a hung launch leaves workers)."""
        process = getattr(self.km.provisioner, "process", None)  # None once the kernel died
        try:
            children = psutil.Process(process.pid).children(recursive=True) if process else []
        except psutil.Error:
            children = []
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_of(lane: str) -> str:
    return "ours" if lane == "before" else lane


def lane_kernel(lane: str) -> Kernel:
    return Kernel(PATHS.get(lane))


def launch_cell(lane: str, n: int) -> str:
    """A cell that launches the job and prints the seconds the call took."""
    job = "trivial" if JOB[0] == "trivial" else "partial_state"
    return (
        "import time as _t, launch_bench as _lb\n"
        f"_t0 = _t.perf_counter(); _lb.LAUNCH[{launcher_of(lane)!r}](_lb.{job}, (), {n}, "
        f"{free_port()})\nprint('SECONDS', _t.perf_counter() - _t0)"
    )


def seconds(printed: str) -> float:
    return float(printed.rsplit("SECONDS", 1)[1].split()[0])


def ready_kernel(name: str, sizes: list[int], hung: dict | None = None) -> Kernel:
    """A kernel that imported ``name``'s launcher and launched every N once (untimed); a
    launch that hangs there is counted in ``hung`` and the kernel started again (3 tries)."""
    for attempt in range(3):
        kernel = lane_kernel(name)
        try:
            kernel.run(IMPORTS[launcher_of(name)])
            for n in sizes:
                kernel.run(launch_cell(name, n))
            return kernel
        except TimeoutError:
            if hung is not None:
                hung[name] = hung.get(name, 0) + 1
            kernel.close()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def warm(sizes: list[int], repeats: int, hung: dict) -> dict:
    kernels = {name: ready_kernel(name, sizes, hung) for name in LAUNCHERS}
    samples = {(name, n): [] for name in LAUNCHERS for n in sizes}
    try:
        order = list(LAUNCHERS)
        for round_ in range(repeats):
            rotated = order[round_ % len(order) :] + order[: round_ % len(order)]
            for n, name in itertools.product(sizes, rotated):
                try:
                    samples[name, n].append(seconds(kernels[name].run(launch_cell(name, n))))
                except TimeoutError:  # a hung launch: counted, its kernel replaced
                    hung[name] = hung.get(name, 0) + 1
                    kernels[name].close()
                    kernels[name] = ready_kernel(name, sizes, hung)
    finally:
        for kernel in kernels.values():
            kernel.close()
    return samples


def first(count: int, settle: float) -> dict:
    samples = {}
    for name, wait in itertools.product(LAUNCHERS, (0.0, settle)):
        key = (name, wait)
        samples[key] = []
        for _ in range(count):
            kernel = lane_kernel(name)
            try:
                if wait:
                    kernel.run(IMPORTS[launcher_of(name)])
                    time.sleep(wait)
                    printed = kernel.run(launch_cell(name, 2))
                else:
                    printed = kernel.run(IMPORTS[launcher_of(name)] + "\n" + launch_cell(name, 2))
                samples[key].append(seconds(printed))
            finally:
                kernel.close()
    return samples


OUTPUT_SETUP = """
import time as _t
from notebook_launcher import notebook_launcher as _launch

def _printer(lines):
    import os
    rank = int(os.environ["RANK"])
    for i in range(lines):
        print(f"line {i} of rank {rank}")
"""

OUTPUT_CELL = """
_t0 = _t.perf_counter()
_r = _launch(_printer, args=({lines},), num_processes=2)
_seconds = _t.perf_counter() - _t0
_last = [state.last_line for state in _r.panel.model.ranks]
print("SECONDS", _seconds, "LAST", _last)
"""

FLOOR_CELL = """
_t0 = _t.perf_counter()
for _rank in range(2):
    for _i in range({lines}):
        print(f"[rank{{_rank}}] line {{_i}} of rank {{_rank}}")
print("SECONDS", _t.perf_counter() - _t0, "LAST", None)
"""


def output_run(kernel: Kernel, cell: str, lines: int) -> tuple[float, str]:
    """One output cell: its seconds, and what is wrong with what reached the client ("" if
    every line arrived, in order, labelled, and the panel's last lines are the last ones)."""
    streams: list = []
    printed = kernel.run(cell.format(lines=lines), timeout=300, streams=streams)
    text = "".join(t for _, t in streams).split("SECONDS")[0]
    per_rank: dict[int, list[int]] = {0: [], 1: []}
    problems = []
    for line in text.splitlines():
        if not line.startswith("[rank"):
            continue
        label, _, rest = line.partition("] ")
        words = rest.split()
        rank = int(label[5:])
        if words[-1] != str(rank):
            problems.append(f"mislabelled: {line!r}")
        per_rank[rank].append(int(words[1]))
    for rank, numbers in per_rank.items():
        if numbers != list(range(lines)):
            problems.append(
                f"rank {rank}: {len(numbers)} of {lines} lines, in order: "
                f"{numbers == sorted(numbers)}"
            )
    last = printed.rsplit("LAST", 1)[1].strip()
    if last != "None":
        expected = str([f"line {lines - 1} of rank {r}" for r in range(2)])
        if last != expected:
            problems.append(f"panel's last lines {last} (expected {expected})")
    return seconds(printed), "; ".join(problems[:3])


def output(lines: int, repeats: int) -> dict:
    """Lines per second into the cell: ours (and before) and the kernel printing them itself."""
    lanes = ["ours"] + (["before"] if "before" in LAUNCHERS else [])
    kernels = {lane: lane_kernel(lane) for lane in lanes + ["kernel"]}
    samples: dict[str, list[float]] = {lane: [] for lane in kernels}
    problems: dict[str, str] = {}
    try:
        for kernel in kernels.values():
            kernel.run(OUTPUT_SETUP)
        for lane in lanes:  # untimed: the first launch imports what the kernel had not
            output_run(kernels[lane], OUTPUT_CELL, 10)
        for _ in range(max(1, repeats // 2)):
            for lane, kernel in kernels.items():
                cell = FLOOR_CELL if lane == "kernel" else OUTPUT_CELL
                took, wrong = output_run(kernel, cell, lines)
                samples[lane].append(took)
                if wrong:
                    problems[lane] = wrong
    finally:
        for kernel in kernels.values():
            kernel.close()
    print(f"\nOutput into the cell: 2 ranks x {lines} lines (median of {len(samples['ours'])})")
    for lane, values in samples.items():
        took = statistics.median(values)
        what = "the kernel prints them itself" if lane == "kernel" else f"{lane}: a launch"
        verdict = problems.get(lane, "every line arrived, in order, labelled; panel kept up")
        print(f"  {what:<30} {took:7.3f} s  {2 * lines / took:9.0f} lines/s  {verdict}")
    return {"samples": samples, "problems": problems}


def report(warm_samples: dict, first_samples: dict, sizes: list[int], settle: float) -> dict:
    med = {k: statistics.median(v) for k, v in warm_samples.items()}
    print("\nWarm launches in a kernel (median seconds; ratio to bare in brackets)")
    print(f"{'N':>3}  " + "  ".join(f"{name:>18}" for name in LAUNCHERS))
    for n in sizes:
        cells = []
        for name in LAUNCHERS:
            ratio = med[name, n] / med["bare", n]
            cells.append(f"{med[name, n]:8.3f} ({ratio:4.2f}x)")
        print(f"{n:>3}  " + "  ".join(f"{c:>18}" for c in cells))
    if first_samples:
        print(
            f"\nFirst launch (N=2) in a fresh kernel, median seconds: at once / {settle:g} s "
            "after import"
        )
        first_med = {k: statistics.median(v) for k, v in first_samples.items()}
        for name in LAUNCHERS:
            print(f"  {name:>10}: {first_med[name, 0.0]:.3f} / {first_med[name, settle]:.3f}")
    return {
        "warm": {f"{k[0]}:{k[1]}": v for k, v in warm_samples.items()},
        "first": {f"{k[0]}:{k[1]}": v for k, v in first_samples.items()},
        "warm_ratio_to_bare": {
            f"{name}:{n}": med[name, n] / med["bare", n] for name in LAUNCHERS for n in sizes
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--first", type=int, default=3, help="fresh kernels per first-launch case")
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds between import and launch"
    )
    parser.add_argument("--job", choices=("partial", "trivial"), default="partial")
    parser.add_argument("--lines", type=int, default=20000, help="lines per rank (0: skip)")
    parser.add_argument("--baseline", help="another checkout: its notebook_launcher as 'before'")
    parser.add_argument("--json", help="write every sample here")
    parser.add_argument("--without", default="", help="lanes left out, e.g. accelerate")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    for lane in filter(None, options.without.split(",")):
        if lane == "bare" or lane not in LAUNCHERS:
            parser.error(f"--without {lane}: one of {', '.join(LAUNCHERS[:-1])} (bare stays)")
        LAUNCHERS.remove(lane)
    if options.repeats < 1 or options.first < 0 or any(n < 1 for n in sizes):
        parser.error("--repeats and every size must be at least 1, --first at least 0")
    JOB[0] = options.job
    if options.baseline:
        LAUNCHERS.append("before")
        PATHS["before"] = os.path.abspath(options.baseline)
    print(
        f"load average {os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} CPUs, "
        f"job {options.job}",
        flush=True,
    )
    hung: dict[str, int] = {}
    warm_samples = warm(sizes, options.repeats, hung)
    if hung:
        print(f"launches that hung (killed after {CELL_TIMEOUT:g} s, not in the medians): {hung}")
    first_samples = first(options.first, options.settle) if options.first else {}
    summary = report(warm_samples, first_samples, sizes, options.settle)
    if options.lines:
        summary["output"] = output(options.lines, options.repeats)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if options.json:
        with open(options.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
