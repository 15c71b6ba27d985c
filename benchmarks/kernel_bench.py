"""Launch latency where users launch: inside a real Jupyter kernel (ipykernel via jupyter_client).

The same three launchers and the same trivial job as ``launch_bench.py`` (join a gloo group,
all_reduce one element, leave), but each launcher lives in an ipykernel of its own, and every launch
is a cell executed in it, timed inside the kernel with ``time.perf_counter()`` around the call:

* ``ours``        ``notebook_launcher.notebook_launcher`` with its defaults (widgets in a kernel)
* ``accelerate``  ``accelerate.notebook_launcher``
* ``bare``        ``torch.multiprocessing`` fork, N x ``Process`` + a fail-fast join loop: the floor

Warm launches: one kernel per launcher, one untimed launch per N, then ``--repeats`` rounds, each
launching every N with every launcher, the launchers' order rotating; medians and ratios to bare.
First launches: for every launcher and ``--first`` times, a fresh kernel imports the launcher
and launches N=2 either at once (same cell) or after ``--settle`` seconds.

    python benchmarks/kernel_bench.py [--repeats 5] [--sizes 1,2,4,8] [--first 3] [--json out.json]
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
LAUNCHERS = ("ours", "accelerate", "bare")
IMPORTS = {
    "ours": "import notebook_launcher",
    "accelerate": "import torch, accelerate",
    "bare": "import torch, torch.multiprocessing",
}
CELL_TIMEOUT = 30.0


class _ThisPython(KernelSpecManager):
    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="this Python",
            language="python",
        )


class Kernel:
    """One ipykernel and a client; ``run`` executes a cell and returns what it printed."""

    def __init__(self) -> None:
        self.km = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisPython())
        # The kernel's own start-up warnings would bury the tables; errors come back over IOPub.
        self.km.start_kernel(
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, (HERE, os.environ.get("PYTHONPATH")))),
            },
            stderr=subprocess.DEVNULL,
        )
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = CELL_TIMEOUT) -> str:
        msg_id = self.kc.execute(code)
        out, deadline = [], time.monotonic() + timeout
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
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                raise RuntimeError("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

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


def launch_cell(launcher: str, n: int) -> str:
    """A cell that launches the trivial job and prints the seconds the call took."""
    return (
        "import time as _t, launch_bench as _lb\n"
        f"_t0 = _t.perf_counter(); _lb.LAUNCH[{launcher!r}](_lb.trivial, (), {n}, {free_port()})\n"
        "print('SECONDS', _t.perf_counter() - _t0)"
    )


def seconds(printed: str) -> float:
    return float(printed.rsplit("SECONDS", 1)[1].split()[0])


def ready_kernel(name: str, sizes: list[int]) -> Kernel:
    """A kernel that imported ``name``'s launcher and launched every N once (untimed)."""
    kernel = Kernel()
    kernel.run(IMPORTS[name])
    for n in sizes:
        kernel.run(launch_cell(name, n))
    return kernel


def warm(sizes: list[int], repeats: int, hung: dict) -> dict:
    kernels = {name: ready_kernel(name, sizes) for name in LAUNCHERS}
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
                    kernels[name] = ready_kernel(name, sizes)
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
            kernel = Kernel()
            try:
                if wait:
                    kernel.run(IMPORTS[name])
                    time.sleep(wait)
                    printed = kernel.run(launch_cell(name, 2))
                else:
                    printed = kernel.run(IMPORTS[name] + "\n" + launch_cell(name, 2))
                samples[key].append(seconds(printed))
            finally:
                kernel.close()
    return samples


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
    print(
        f"\nFirst launch (N=2) in a fresh kernel, median seconds: at once / {settle:g} s after import"
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
    parser.add_argument("--json", help="write every sample here")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    if options.repeats < 1 or options.first < 1 or any(n < 1 for n in sizes):
        parser.error("--repeats, --first and every size must be at least 1")
    hung: dict[str, int] = {}
    warm_samples = warm(sizes, options.repeats, hung)
    if hung:
        print(f"launches that hung (killed after {CELL_TIMEOUT:g} s, not in the medians): {hung}")
    first_samples = first(options.first, options.settle)
    summary = report(warm_samples, first_samples, sizes, options.settle)
    if options.json:
        with open(options.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
