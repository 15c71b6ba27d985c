"""How soon a cell waiting at a background launch's prompt returns once the launch ends: in a
real ipykernel, ``launch_in_background`` of 2 ranks, rank 1 at ``breakpoint()``, a cell in
``handle.wait()`` at its ``(Pdb rank 1)`` prompt (the kernel's ``input()``), nothing typed. Then
either ``handle.stop()`` from another thread of the kernel ("stop"), or rank 0 raises ("fail").
The time, measured in the kernel, from the stop call (or rank 0's raise) to ``handle.wait()``
raising; N rounds of each.

    python benchmarks/prompt_close_bench.py [N]

Prints the median and the longest of each, in seconds.
"""

from __future__ import annotations

import ast
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.kernelrun import Kernel  # noqa: E402

SETUP = r"""
import os, threading, time
from notebook_launcher import launch_in_background

def train(path):
    if os.environ["RANK"] == "1":
        breakpoint()
        return 1
    while not os.path.exists(path):
        time.sleep(0.01)
    with open(path + ".raised", "w") as mark:
        mark.write(repr(time.time()))
    raise ValueError("rank 0 gave up")

def on_file(path, act):
    def watch():
        while not os.path.exists(path):
            time.sleep(0.01)
        act()
    threading.Thread(target=watch, daemon=True).start()

def stop_and_mark():
    global stopped_at
    stopped_at = time.time()
    handle.stop()

def waited():
    global returned_at
    try:
        handle.wait(timeout=120)
    except BaseException as exc:
        returned_at = time.time()
        return type(exc).__name__
"""


def one(kernel: Kernel, how: str, folder: str, number: int) -> float:
    path = f"{folder}/{how}{number}"
    start = kernel.start(  # from a cell that takes input, as a notebook's
        f"handle = launch_in_background(train, args=({path!r},), num_processes=2)",
        allow_stdin=True,
    )
    start.finish(60)
    assert start.error() is None, start.output()
    if how == "stop":
        kernel.execute(f"on_file({path + '.go'!r}, stop_and_mark)", 30)
    cell = kernel.start("waited()", allow_stdin=True)
    assert cell.prompt(90) == "(Pdb rank 1) ", cell.output()
    Path(path + (".go" if how == "stop" else "")).touch()
    cell.finish(60)
    expected = "'LaunchStoppedError'" if how == "stop" else "'ValueError'"
    assert cell.result() == expected, cell.output()
    if how == "stop":
        began = ast.literal_eval(kernel.execute("repr(stopped_at)", 30).result())
    else:
        began = float(Path(path + ".raised").read_text())
    ended = ast.literal_eval(kernel.execute("repr(returned_at)", 30).result())
    return float(ended) - float(began)


def main(rounds: int) -> None:
    kernel = Kernel()
    times: dict[str, list[float]] = {"stop": [], "fail": []}
    try:
        assert kernel.execute(SETUP, 60).error() is None
        with tempfile.TemporaryDirectory() as folder:
            for number in range(rounds):
                for how in times:  # interleaved
                    times[how].append(one(kernel, how, folder, number))
                    time.sleep(0.5)
    finally:
        problems = kernel.close()
    for how, seconds in times.items():
        print(
            f"{how}: {len(seconds)} rounds, median {statistics.median(seconds):.3f} s, "
            f"longest {max(seconds):.3f} s"
        )
    assert not problems, problems


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
