"""Worker output into a real kernel's cell with alike lines grouped: lines per second, the
time from a rank's print to the line at the client, and the cell's output count, at several N.

    python benchmarks/output_bench.py [--sizes 2,8] [--lines 20000] [--repeats 3] [--drift 0.05]

Four cells per N: every rank prints ``--lines`` lines alike (grouped to one line each), every
rank prints lines of its own (nothing to group), a latency cell where each rank prints a
line stamped with ``time.time()`` every 0.2 s (once only rank 0, once every rank alike), and a
drift cell: every rank prints 5 lines alike, one a second, rank r ``--drift`` × r seconds after
rank 0 (the groups each line is shown in, and the time from rank 0's print to the first group,
from the last rank's print to its group). Lines per second count the lines the ranks printed
over the cell's time in the kernel.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.kernelrun import Kernel  # noqa: E402

SETUP = r"""
import os, time as _t
os.environ["NOTEBOOK_LAUNCHER_MAX_PROCESSES"] = "64"
from notebook_launcher import notebook_launcher

def _alike(lines):
    for i in range(lines):
        print(f"line {i} alike")

def _own(lines):
    rank = os.environ["RANK"]
    for i in range(lines):
        print(f"line {i} of rank {rank}")

def _stamped(count, only_rank0):
    import time
    rank = int(os.environ["RANK"])
    for i in range(count):
        time.sleep(0.2)
        if not only_rank0 or rank == 0:
            print(f"STAMP {i} {time.time()!r}", flush=True)

def _drifting(start, delay, count):
    import time
    rank = int(os.environ["RANK"])
    for i in range(count):
        due = start + i * 1.0
        time.sleep(max(0.0, due + rank * delay - time.time()))
        print(f"DRIFT {i} {due!r}", flush=True)
"""

DRIFT = """
notebook_launcher(_drifting, args=(_t.time() + 3.0, {delay}, {count}), num_processes={n}, ui="none")
"""

THROUGHPUT = """
_t0 = _t.perf_counter()
_r = notebook_launcher({function}, args=({lines},), num_processes={n}, ui="none")
print("SECONDS", _t.perf_counter() - _t0)
"""

LATENCY = """
notebook_launcher(_stamped, args=({count}, {only}), num_processes={n}, ui="none")
"""


def throughput(kernel: Kernel, function: str, lines: int, n: int) -> tuple[float, int, int]:
    cell = kernel.execute(THROUGHPUT.format(function=function, lines=lines, n=n), timeout=600)
    assert cell.error() is None, cell.output()
    text = cell.stream("stdout")
    took = float(text.rsplit("SECONDS", 1)[1])
    return n * lines / took, len(text.splitlines()) - 1, len(cell.output_blocks())


def latency(kernel: Kernel, n: int, only_rank0: bool, count: int = 15) -> list[float]:
    """Seconds from each stamped print to the arrival of the stream message holding it."""
    cell = kernel.start(LATENCY.format(count=count, only=only_rank0, n=n))
    cell.finish(timeout=300)
    delays = []
    for msg, arrived_mono in zip(cell.messages, cell.arrived, strict=True):
        if msg["msg_type"] != "stream":
            continue
        arrived = time.time() - (time.monotonic() - arrived_mono)
        for line in msg["content"]["text"].splitlines():
            if "STAMP" in line:
                delays.append(arrived - float(line.rsplit(" ", 1)[1]))
    return delays


def drift(kernel: Kernel, n: int, delay: float, count: int = 5) -> tuple[float, list, list]:
    """Groups per line, seconds from rank 0's print to the line's first group, and from the
    last rank's print to the group that holds it."""
    cell = kernel.start(DRIFT.format(delay=delay, count=count, n=n))
    cell.finish(timeout=300)
    groups, first, last = 0, {}, {}
    for msg, arrived_mono in zip(cell.messages, cell.arrived, strict=True):
        if msg["msg_type"] != "stream":
            continue
        arrived = time.time() - (time.monotonic() - arrived_mono)
        for line in msg["content"]["text"].splitlines():
            if "DRIFT" not in line:
                continue
            groups += 1
            index, due = line.rsplit(" ", 2)[1:]
            first.setdefault(index, arrived - float(due))
            if f"{n - 1}]" in line.split(" DRIFT")[0]:
                last[index] = arrived - float(due) - (n - 1) * delay
    return groups / count, list(first.values()), list(last.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="2,8")
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drift", type=float, default=0.05)
    args = parser.parse_args()
    kernel = Kernel()
    try:
        assert kernel.execute(SETUP, timeout=60).error() is None
        kernel.execute(THROUGHPUT.format(function="_own", lines=10, n=2), timeout=120)  # warm
        print(f"{'N':>3} {'lines':<12} {'lines/s':>10} {'shown':>8} {'outputs':>8}")
        for n in [int(x) for x in args.sizes.split(",")]:
            for function in ("_alike", "_own"):
                runs = [throughput(kernel, function, args.lines, n) for _ in range(args.repeats)]
                rate = statistics.median(r[0] for r in runs)
                print(f"{n:>3} {function[1:]:<12} {rate:>10.0f} {runs[0][1]:>8} {runs[0][2]:>8}")
            for only in (True, False):
                delays = latency(kernel, n, only)
                who = "rank 0 only" if only else "every rank"
                print(
                    f"{n:>3} latency, {who}: median {statistics.median(delays):.3f} s, "
                    f"max {max(delays):.3f} s over {len(delays)} lines"
                )
            per_line, first, last = drift(kernel, n, args.drift)
            print(
                f"{n:>3} drift {args.drift} s a rank: {per_line:.1f} groups a line, first group "
                f"{statistics.median(first):.3f} s (max {max(first):.3f}), last rank's "
                f"{statistics.median(last):.3f} s (max {max(last):.3f})"
            )
    finally:
        kernel.close()


if __name__ == "__main__":
    main()
