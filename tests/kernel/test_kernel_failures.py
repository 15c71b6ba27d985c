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

    traceback = cell.traceback()
    assert "rank 1 (local rank 1, pid " in traceback
    assert f"pid {last_line[1]}" in traceback
    assert last_line[0] in traceback
    assert "Stopped because of this failure: rank 0." in traceback


def test_the_error_shows_the_report_once_without_the_launchers_frames(kernel):
    cell, _ = run_failing(kernel)

    lines = cell.traceback().splitlines()
    assert lines[0] == "ValueError: bad batch 17"
    shown = "\n".join(lines)
    assert shown.count("Stopped because of this failure") == 1
    assert "Traceback of rank 1:\n  Cell In[" in shown  # the worker's frames, named as IPython does
    assert 'raise ValueError("bad batch 17")' in shown
    assert "notebook_launcher/" not in shown  # neither the kernel's nor the bootstrap's frames
    assert "_run_with_ui" not in shown and "rdzv_timeout" not in shown
    assert "RemoteTraceback" not in shown and "direct cause" not in shown
    assert re.fullmatch(r"  Cell In\[\d+\], line \d+, in <module>", lines[-2])  # the caller
    assert lines[-1] == "    notebook_launcher(fails_on_rank_one, num_processes=2)"
    # Elsewhere (a script, a plain Python shell) the report is the exception's cause.
    plain = kernel.execute(
        "import sys, traceback\n"
        "print(''.join(traceback.format_exception(sys.last_value)).count('Traceback of rank'))",
        timeout=10,
    )
    assert plain.stream("stdout") == "1\n", plain.output()


def test_the_failed_runs_final_panel_stays_in_the_cell_before_the_error(kernel):
    cell, _ = run_failing(kernel)

    kinds = [m["msg_type"] for m in cell.messages]
    kept = [m for m in cell.of_type("display_data") if "text/html" in m["content"]["data"]]
    assert len(kept) == 1
    assert kinds.index("error") > cell.messages.index(kept[0])
    data = kept[0]["content"]["data"]
    assert data["text/plain"] == (
        "notebook_launcher: 2 ranks; rank 1 failed: ValueError: bad batch 17"
    )
    assert 'data-rank="1" data-state="failed"' in data["text/html"]
    assert "rank 1: ValueError: bad batch 17" in data["text/html"]  # the blamed rank, in red


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
    shown = cell.traceback()
    assert shown.count("Stack of rank 0:") == 1 and shown.count("Stack of rank 1:") == 1
    assert "Stack of rank" not in cell.stream()  # the report is shown once: by the error
    assert "in sleeps_in_rank_one" in shown  # rank 1's stack
    assert "in wait_for_everyone" in shown  # rank 0's stack
    assert "most likely held up by rank 1" in shown  # rank 0 only waited
    assert "rank 1 was in sleeps_in_rank_one (Cell In[" in shown  # named as IPython names cells
    assert "Cell In[1], line 5 in sleeps_in_rank_one" in shown
    assert "run_worker" not in shown and "site-packages/ipykernel" not in shown  # bootstrap cut
    assert "notebook_launcher/launch/" not in shown
    # The final panel stays in the cell, the rank that held the others up marked.
    (kept,) = [m for m in cell.of_type("display_data") if "text/html" in m["content"]["data"]]
    assert kept["content"]["data"]["text/plain"] == (
        "notebook_launcher: 2 ranks: 2 stopped (stall_timeout expired); likely cause: rank 1"
    )
    print(f"cell start -> error message: {cell.error_at():.2f} s")


@pytest.mark.parametrize(
    "call, first_line",
    [
        ("notebook_launcher(train, num_processes=0)", "ValueError: num_processes=0 is not valid"),
        ("notebook_launcher(train(), num_processes=2)", "TypeError: function=None is not valid"),
        (
            "notebook_launcher(train, num_processes=2, stall_timeout=-1)",
            "ValueError: stall_timeout=-1 is not valid",
        ),
        (
            "launch_in_background(train, num_processes=2, bogus=1)",
            "TypeError: bogus is not a setting of notebook_launcher",
        ),
        (
            "notebook_launcher(train, args=(threading.Lock(),), num_processes=2, "
            "start_method='spawn')",
            "TypeError: args[0] (_thread.lock) cannot be pickled",
        ),
    ],
)
def test_a_bad_argument_is_shown_without_the_launchers_frames(kernel, call, first_line):
    cell = kernel.execute(
        "import threading\n"
        "from notebook_launcher import launch_in_background, notebook_launcher\n"
        "def train(*args):\n    return None\n" + call,
        timeout=60,
    )
    lines = cell.traceback().splitlines()
    assert lines[0].startswith(first_line), lines
    assert "notebook_launcher/" not in "\n".join(lines)  # none of the launcher's frames
    callers = [line for line in lines if line.startswith("  Cell In[")]
    assert len(callers) == 1 and callers[0].endswith(", in <module>"), lines  # the caller only
    assert len(lines) < 12, lines
    # The exception is the one Python code catches: its type and message are unchanged.
    caught = kernel.execute(
        f"try:\n    {call}\nexcept (TypeError, ValueError) as error:\n    print('caught', error)",
        timeout=60,
    )
    assert caught.stream("stdout").startswith("caught " + first_line.split(": ", 1)[1])
