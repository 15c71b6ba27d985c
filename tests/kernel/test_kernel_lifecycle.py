"""Interrupts, kernel shutdown and kernel death while workers run: no worker outlives them."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from helpers.kernelrun import alive, wait_until

pytestmark = pytest.mark.kernel

SLEEPERS = r"""
import os, time
from notebook_launcher import notebook_launcher

def sleeps():
    print(f"sleeping in pid {os.getpid()}", flush=True)
    time.sleep(1000)

notebook_launcher(sleeps, num_processes=2)
"""

PID_LINE = re.compile(r"^\[rank(\d)\] sleeping in pid (\d+)$", re.M)


def start_sleepers(kernel):
    """Start SLEEPERS, wait until both ranks have printed their pid, return the cell and pids."""
    cell = kernel.start(SLEEPERS)
    both = cell.wait_for(lambda c: len(PID_LINE.findall(c.stream())) == 2, timeout=60)
    assert both, f"workers did not start: {cell.output()}"
    pids = sorted(int(pid) for _, pid in PID_LINE.findall(cell.stream()))
    kernel.watch(pids)
    assert sorted(p.pid for p in kernel.workers()) == pids
    return cell, pids


def test_interrupt_stops_every_worker_and_the_kernel_can_launch_again(kernel):
    cell, pids = start_sleepers(kernel)

    interrupted = time.monotonic()
    kernel.km.interrupt_kernel()
    cell.finish(timeout=15)
    ended = time.monotonic()

    error = cell.error()
    assert error is not None and error["ename"] == "KeyboardInterrupt", cell.output()
    gone = wait_until(lambda: not kernel.workers() and not alive(pids), timeout=2.0)
    assert gone, f"workers left 2 s after the interrupted cell ended: {alive(pids)}"
    print(f"interrupt -> cell ended: {ended - interrupted:.2f} s")

    again = kernel.execute(
        "def hello():\n"
        "    import os\n"
        "    print('hello from rank', os.environ['RANK'])\n"
        "    return int(os.environ['RANK'])\n"
        "notebook_launcher(hello, num_processes=2)\n",
        timeout=60,
    )
    assert again.error() is None, again.output()
    assert sorted(again.stream("stdout").splitlines()) == [
        "[rank0] hello from rank 0",
        "[rank1] hello from rank 1",
    ]
    assert again.result() == "LaunchResult(2 processes, by rank: {0: 0, 1: 1})"


def test_kernel_shutdown_ends_running_workers(kernel):
    _, pids = start_sleepers(kernel)

    kernel.km.shutdown_kernel(now=True)

    assert wait_until(lambda: not alive(pids), timeout=2.0), f"workers left: {alive(pids)}"


def test_killed_kernel_takes_its_workers_with_it(kernel):
    _, pids = start_sleepers(kernel)

    os.kill(kernel.pid, signal.SIGKILL)

    assert wait_until(lambda: not alive(pids), timeout=2.0), f"workers left: {alive(pids)}"
