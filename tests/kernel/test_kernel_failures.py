"""A failing or stalled rank, seen from a real kernel: the cell's error and what it shows."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.kernel


FAILING = r"""
import os
from notebook_launcher import PartialState, notebook_launcher

def fails_on_rank_one():
    state = PartialState()
    if state.process_index == 1:
        print(f"rank 1 is about to fail, pid {os.getpid()}", flush=True)
        raise ValueError("bad batch 17")
    state.wait_for_everyone()  # rank 1 never arrives: rank 0 waits until it is stopped

notebook_launcher(fails_on_rank_one, num_processes=2)
"""


def run_failing(kernel):
    """Run FAILING; return the cell and the last line rank 1 printed (with its pid)."""
    kernel.execute("import notebook_launcher", timeout=60)  # keep the import out of the timing
    cell = kernel.execute(FAILING, timeout=60)
    assert cell.error() is not None, cell.output()
    last_line = re.search(r"^\[rank1\] rank 1 is about to fail, pid (\d+)$", cell.stream(), re.M)
    assert last_line, cell.stream()
    return cell, last_line


def test_rank_failure_raises_its_own_exception_with_worker_traceback_and_notes(kernel):
    cell, last_line = run_failing(kernel)

    error = cell.error()
    assert error["ename"] == "ValueError"
    assert error["evalue"] == "bad batch 17"
    traceback = cell.traceback()
    assert "fails_on_rank_one" in traceback  # the worker's own traceback, as the cause
    assert 'raise ValueError("bad batch 17")' in traceback
    seconds = cell.error_at()
    print(f"cell start -> error message: {seconds:.2f} s")
    assert seconds < 15
    # The launch details travel as notes of the exception the kernel raised.
    notes = kernel.execute("import sys; print(*sys.last_value.__notes__)", timeout=10)
    assert notes.error() is None, notes.output()
    shown = notes.stream("stdout")
    assert "rank 1 (local rank 1, pid " in shown
    assert f"pid {last_line[1]}" in shown
    assert "Stopped because of this failure: rank 0." in shown


def test_rank_failure_shows_rank_pid_and_last_line_in_the_cell_traceback(kernel):
    cell, last_line = run_failing(kernel)

    # Shown by every IPython: the report is the exception's cause, not only a note (IPython
    # before 8.15 does not show notes).
    traceback = cell.traceback()
    assert "rank 1 (local rank 1, pid " in traceback
    assert f"pid {last_line[1]}" in traceback
    assert last_line[0] in traceback
    assert "Stopped because of this failure: rank 0." in traceback


STALLED = r"""
import time
from notebook_launcher import PartialState, notebook_launcher

def sleeps_in_rank_one():
    time.sleep(1000)

def one_rank_hangs():
    state = PartialState()
    print("joined", flush=True)
    if state.process_index == 1:
        sleeps_in_rank_one()
    state.wait_for_everyone()

notebook_launcher(one_rank_hangs, num_processes=2, stall_timeout=3)
"""


def test_stalled_rank_shows_every_stack_and_raises_worker_stalled_error(kernel):
    cell = kernel.execute(STALLED, timeout=40)

    error = cell.error()
    assert error is not None, cell.output()
    assert error["ename"] == "WorkerStalledError"
    shown = cell.stream()
    assert "Python stack of rank 0:" in shown
    assert "Python stack of rank 1:" in shown
    assert "sleeps_in_rank_one" in shown  # rank 1's stack
    assert "wait_for_everyone" in shown  # rank 0's stack
    assert "sleeps_in_rank_one" in cell.traceback()  # the error carries the stacks as well
    assert "most likely held up by rank 1" in cell.traceback()  # rank 0 only waited
    assert "run_worker" in shown and "site-packages/ipykernel" not in shown  # kernel frames cut
    assert "rank 1 was in sleeps_in_rank_one (Cell In[" in shown  # named as IPython names cells
    print(f"cell start -> error message: {cell.error_at():.2f} s")
