"""What counts as progress, with real workers: a job whose ranks wait for a sleeping rank is
stalled; a job with one rank computing (while the others wait for it) is not.

Bounds are generous (the suite runs on a loaded 2-core machine); the figures that matter are
measured by ``benchmarks/stall_latency.py``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from notebook_launcher import PartialState, WorkerStalledError, notebook_launcher
from notebook_launcher.ops import reduce

STALL = 4.0  # stall_timeout of these tests: the rule is the same at 10 s or 900 s
LATE = 12.0  # seconds after the ranks went quiet: a generous bound for STALL
QUIET_MARK = "quiet-since"


def _quiet_from_now(folder: str) -> None:
    """Record when this rank falls silent (the test measures the stall from there)."""
    Path(folder, f"{QUIET_MARK}-{os.environ['RANK']}").write_text(repr(time.time()))


def sleeps_while_rank_0_waits_in_barrier(folder):
    PartialState()
    _quiet_from_now(folder)
    if int(os.environ["RANK"]) == 1:
        time.sleep(3600)
    dist.barrier()


def sleeps_while_rank_0_waits_in_reduce(folder):
    PartialState()
    _quiet_from_now(folder)
    if int(os.environ["RANK"]) == 1:
        time.sleep(3600)
    return reduce(torch.ones(3), "sum")


def both_sleep(folder):
    PartialState()
    _quiet_from_now(folder)
    time.sleep(3600)


def _quiet_since(folder: Path) -> float:
    return max(float(p.read_text()) for p in folder.glob(f"{QUIET_MARK}-*"))


@pytest.mark.parametrize(
    "function, culprits",
    [
        (sleeps_while_rank_0_waits_in_barrier, (1,)),
        (sleeps_while_rank_0_waits_in_reduce, (1,)),
        (both_sleep, (0, 1)),
    ],
    ids=["gloo-barrier", "shared-memory-reduce", "both-sleep"],
)
def test_ranks_waiting_for_a_sleeping_rank_are_a_stall(tmp_path, function, culprits):
    with pytest.raises(WorkerStalledError) as info:
        notebook_launcher(function, args=(str(tmp_path),), num_processes=2, stall_timeout=STALL)
    raised = time.time()

    error = info.value
    assert error.ranks == culprits
    where = "rank 1 is where the job is stuck" if culprits == (1,) else "rank 0, 1 are where"
    assert where in str(error)
    assert "stall_timeout=4" in str(error)
    if culprits == (1,):
        assert "most likely held up by rank 1" in str(error)
        assert "waiting for the other ranks" in str(error)  # where rank 0 was
    assert set(error.stacks) == {0, 1}
    assert STALL <= raised - _quiet_since(tmp_path) < STALL + LATE


def computes_while_rank_1_waits(seconds):
    state = PartialState()
    if state.process_index == 0:
        end = time.monotonic() + seconds
        x = torch.randn(200, 200)
        while time.monotonic() < end:  # silent: no output, no events
            x = torch.tanh(x @ x)
    state.wait_for_everyone()
    return state.process_index


def test_a_rank_computing_silently_is_progress_for_the_ranks_waiting_for_it():
    # Three times the stall timeout: rank 0's computation keeps the job alive throughout.
    result = notebook_launcher(
        computes_while_rank_1_waits, args=(3 * STALL,), num_processes=2, stall_timeout=STALL
    )
    assert result.values == [0, 1]


def writes_a_file_slowly(folder, seconds):
    """I/O-bound work: little CPU, but bytes written (a checkpoint to a slow disk)."""
    state = PartialState()
    if state.process_index == 0:
        end = time.monotonic() + seconds
        with open(Path(folder, "checkpoint.bin"), "wb") as file:
            block = b"x" * (1 << 20)
            while time.monotonic() < end:
                file.write(block)
                file.flush()
                time.sleep(0.05)  # a slow device: mostly waiting
    state.wait_for_everyone()
    return state.process_index


def test_a_rank_writing_a_checkpoint_is_progress(tmp_path):
    result = notebook_launcher(
        writes_a_file_slowly, args=(str(tmp_path), 3 * STALL), num_processes=2, stall_timeout=STALL
    )
    assert result.values == [0, 1]


def walks_through_python_slowly(seconds):
    """A Python loop that neither computes much nor prints: its stack moves between samples."""
    state = PartialState()
    if state.process_index == 0:
        end = time.monotonic() + seconds
        step = 0
        while time.monotonic() < end:
            step = _one_slow_step(step)
    state.wait_for_everyone()
    return state.process_index


def _one_slow_step(step):
    time.sleep(0.3)
    return _another_slow_step(step + 1)


def _another_slow_step(step):
    time.sleep(0.3)
    return step + 1


def test_a_python_stack_that_moves_is_progress():
    result = notebook_launcher(
        walks_through_python_slowly, args=(3 * STALL,), num_processes=2, stall_timeout=STALL
    )
    assert result.values == [0, 1]
