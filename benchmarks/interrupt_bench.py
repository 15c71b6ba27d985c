"""How fast and how short an interrupted cell ends: a `%%distributed` cell against IPython
Parallel's `%%px`, each in a real Jupyter kernel.

The client (jupyter_client) runs a cell whose work never ends, waits ``--after`` seconds, asks
the kernel manager for an interrupt (SIGINT to the kernel, as JupyterLab's Stop button does) and
times until the kernel is idle again; it also counts the lines of the error the cell shows and
runs one more cell, which must work. The works, on every rank / engine:

* ``sleep``    a Python loop of short sleeps (a rank waiting on I/O or a data loader);
* ``train``    a small ``nn.Linear`` forward/backward, its gradients ``all_reduce``d each step
               (IPython Parallel's engines form no process group: theirs is the same step
               without the ``all_reduce``);
* ``peer``     (ours only) rank 1 sleeps while the other ranks wait for it in ``dist.barrier()``:
               the ranks in the barrier can only leave once the group is formed again.

    python benchmarks/interrupt_bench.py [--n 2] [--trials 5] [--after 1.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time

from kernel_bench import Kernel

WORKS = ("sleep", "train", "peer")

OURS_SETUP = """
%load_ext notebook_launcher
"""

OURS_START = """
%%distributed -n {n}
import time, torch, torch.distributed as dist
ready = 1
"""

IPP_START = """
import ipyparallel as ipp

cluster = ipp.Cluster(n={n}, profile_dir={profile!r}, engine_timeout=90, log_level=40)
rc = cluster.start_and_connect_sync(activate=True)
rc[:].execute("import time, torch", block=True)
"""

LOOPS = {
    "sleep": """
while True:
    time.sleep(0.01)
""",
    "train": """
model = torch.nn.Linear(256, 256)
batch = torch.randn(64, 256)
while True:
    model(batch).pow(2).mean().backward()
    for parameter in model.parameters():
        {reduce}
""",
    "peer": """
if dist.get_rank() == 1:
    time.sleep(3600)
dist.barrier()
""",
}

CHECK = {"ours": "%%distributed\nready + 1", "ipyparallel": "%px ready = 2"}


def loop_cell(lane: str, work: str) -> str:
    reduce = "dist.all_reduce(parameter.grad)" if lane == "ours" else "pass"
    body = LOOPS[work].format(reduce=reduce)
    return ("%%distributed\n" if lane == "ours" else "%%px\n") + body


def interrupted(kernel: Kernel, cell: str, after: float, timeout: float = 60.0) -> dict:
    """Run ``cell``, interrupt it ``after`` seconds in; the seconds from the interrupt to the
    kernel's idle status and the lines of the error it showed."""
    msg_id = kernel.kc.execute(cell)
    time.sleep(after)
    sent = time.perf_counter()
    kernel.km.interrupt_kernel()
    error_lines = 0
    for kind, content in kernel.replies(msg_id, timeout, cell):
        if kind == "error":
            error_lines = sum(len(part.splitlines()) for part in content["traceback"])
    return {"seconds": time.perf_counter() - sent, "error_lines": error_lines}


def run_lane(lane: str, options) -> dict[str, list[dict]]:
    kernel = Kernel()
    got: dict[str, list[dict]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="interrupt_bench-") as profile:
            if lane == "ours":
                kernel.run(OURS_SETUP)
                kernel.run(OURS_START.format(n=options.n), timeout=120)
            else:
                kernel.run(IPP_START.format(n=options.n, profile=profile), timeout=180)
                kernel.run("%px ready = 1")
            works = WORKS if lane == "ours" else WORKS[:2]
            for work in works:
                got[work] = []
                for _ in range(options.trials):
                    trial = interrupted(kernel, loop_cell(lane, work), options.after)
                    try:
                        kernel.run(CHECK[lane], timeout=60)
                        trial["next_cell"] = "works"
                    except (RuntimeError, TimeoutError) as error:
                        trial["next_cell"] = f"failed: {str(error).splitlines()[-1][:120]}"
                    got[work].append(trial)
            if lane == "ipyparallel":
                kernel.run("cluster.stop_cluster_sync()", timeout=120)
    finally:
        kernel.close()
    return got


def report(results: dict[str, dict[str, list[dict]]], options) -> None:
    print(
        f"\nInterrupt of a cell at N = {options.n}, {options.after} s in ({options.trials} trials)"
    )
    print(
        f"{'lane':<12} {'work':<6} {'to idle, s (median, max)':<26} {'error lines':<12} next cell"
    )
    ours_sleep = None
    for lane, works in results.items():
        for work, trials in works.items():
            seconds = [t["seconds"] for t in trials]
            median = statistics.median(seconds)
            if lane == "ours" and work == "sleep":
                ours_sleep = median
            lines = sorted({t["error_lines"] for t in trials})
            nexts = sorted({t["next_cell"] for t in trials})
            print(
                f"{lane:<12} {work:<6} {median:>8.3f}, {max(seconds):<16.3f} "
                f"{','.join(map(str, lines)):<12} {'; '.join(nexts)}"
            )
    ipp = results.get("ipyparallel", {}).get("sleep")
    if ipp and ours_sleep is not None:
        ratio = ours_sleep / statistics.median(t["seconds"] for t in ipp)
        print(f"ours / %%px (sleep): {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2, help="ranks / engines")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--after", type=float, default=1.0, help="seconds before the interrupt")
    parser.add_argument("--json", help="also write the raw results to this file")
    options = parser.parse_args()
    if options.n < 2 or options.trials < 1 or options.after <= 0:
        parser.error("--n must be at least 2, --trials at least 1 and --after positive")
    lanes = ["ours"]
    if importlib.util.find_spec("ipyparallel") is not None:
        lanes.append("ipyparallel")
    else:
        print("ipyparallel is not installed (pip install -e .[bench]): ours only")
    results = {lane: run_lane(lane, options) for lane in lanes}
    report(results, options)
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
