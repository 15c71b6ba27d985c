"""Stalls, timeouts, restarts and interrupts, with real workers."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path

import psutil
import pytest
from helpers.processtree import live_descendants

from notebook_launcher import LaunchTimeoutError, PartialState, WorkerStalledError
from notebook_launcher import notebook_launcher as launch

SANITY_LIMIT = 15.0  # seconds; a generous bound, not a performance target


def ranks():
    return int(os.environ["RANK"])


def assert_relaunch_works():
    assert launch(ranks, num_processes=2).values == [0, 1]


def sleep_forever():
    time.sleep(3600)


def rank_1_sleeps_rank_0_waits():
    state = PartialState()
    if state.process_index == 1:
        sleep_forever()
    # Rank 0 shows a sign of life after rank 1 fell silent, so rank 1 is the first to stall.
    time.sleep(0.6)
    print("rank 0 waits for rank 1", flush=True)
    state.wait_for_everyone()


def test_stalled_rank_raises_with_every_ranks_stack(capfd):
    started = time.monotonic()
    with pytest.raises(WorkerStalledError) as info:
        launch(rank_1_sleeps_rank_0_waits, num_processes=2, stall_timeout=2)
    elapsed = time.monotonic() - started

    error = info.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, LaunchTimeoutError)
    assert error.ranks  # whichever rank crossed the limit first; the stacks tell who held up whom
    assert "most likely held up by rank 1" in str(error)
    assert "stall_timeout=2" in str(error)
    assert set(error.stacks) == {0, 1}
    assert "in sleep_forever" in error.stacks[1]
    assert "in rank_1_sleeps_rank_0_waits" in error.stacks[1]
    assert "in wait_for_everyone" in error.stacks[0]
    assert "Stack of rank 1:" in str(error)

    captured = capfd.readouterr()
    assert "[rank0] rank 0 waits for rank 1" in captured.out.splitlines()
    assert "sleep_forever" not in captured.err  # the report is shown once: by the error
    assert 2 <= elapsed < SANITY_LIMIT
    assert_relaunch_works()


def test_timeout_raises_launch_timeout_error_with_stacks(capfd):
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError) as info:
        launch(sleep_forever, num_processes=2, timeout=2)
    elapsed = time.monotonic() - started

    error = info.value
    assert type(error) is LaunchTimeoutError  # not a stall: the default stall_timeout is long
    assert isinstance(error, TimeoutError)
    assert set(error.stacks) == {0, 1}
    assert all("in sleep_forever" in stack for stack in error.stacks.values())
    assert "exceeded its timeout" in str(error)
    assert "sleep_forever" not in capfd.readouterr().err  # shown once: by the error
    assert 2 <= elapsed < SANITY_LIMIT
    assert_relaunch_works()


def stall_on_the_first_attempt(marker):
    if not Path(marker).exists():
        Path(marker).write_text("stalled once")
        sleep_forever()
    return int(os.environ["RANK"])


def test_a_stall_with_a_restart_left_shows_its_report_before_restarting(tmp_path, capfd):
    marker = tmp_path / "attempted"
    result = launch(
        stall_on_the_first_attempt,
        args=(str(marker),),
        num_processes=1,
        stall_timeout=2,
        max_restarts=1,
    )
    assert result.values == [0] and result.restarts == 1
    err = capfd.readouterr().err
    assert err.count("Stack of rank 0:") == 1 and "in sleep_forever" in err  # not raised: shown
    assert "restarting all 1 processes (restart 1 of 1)" in err


def fail_first_attempt_on_rank_1(marker):
    state = PartialState()
    attempt_file = Path(marker)
    if state.process_index == 1 and not attempt_file.exists():
        attempt_file.write_text("failed once")
        raise RuntimeError("first attempt fails")
    state.wait_for_everyone()
    return (state.process_index, os.environ["TORCHELASTIC_RESTART_COUNT"])


def test_restart_after_a_failure_succeeds(tmp_path, capfd):
    marker = tmp_path / "attempted"
    result = launch(
        fail_first_attempt_on_rank_1, args=(str(marker),), num_processes=2, max_restarts=2
    )

    assert marker.read_text() == "failed once"
    assert result.values == [(0, "1"), (1, "1")]
    assert result.restarts == 1
    err = capfd.readouterr().err
    assert "RuntimeError: first attempt fails" in err
    assert "restarting all 2 processes (restart 1 of 2)" in err
    assert "restart 2 of 2" not in err


def always_fail_on_rank_1():
    if os.environ["RANK"] == "1":
        raise ValueError(f"failure on attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}")
    time.sleep(30)


def test_exhausted_restarts_raise_the_last_failure(capfd):
    with pytest.raises(ValueError, match="failure on attempt 2") as info:
        launch(always_fail_on_rank_1, num_processes=2, max_restarts=2)

    assert info.value.launch_failure.rank == 1
    err = capfd.readouterr().err
    assert "restart 1 of 2" in err
    assert "restart 2 of 2" in err
    assert "restart 3" not in err
    assert_relaunch_works()


def sleep_once_ready(folder):
    Path(folder, f"ready{os.environ['RANK']}").touch()
    sleep_forever()


def interrupt_once_workers_sleep(folder: Path, stop: threading.Event) -> None:
    """SIGINT to this process, as a notebook's interrupt button sends, once both ranks run."""
    deadline = time.monotonic() + 20
    while not stop.is_set() and time.monotonic() < deadline:
        if all((folder / f"ready{rank}").exists() for rank in (0, 1)):
            time.sleep(0.2)
            if not stop.is_set():
                os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.02)


def test_keyboard_interrupt_stops_every_worker(tmp_path):
    handler_before = signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    interrupter = threading.Thread(target=interrupt_once_workers_sleep, args=(tmp_path, stop))
    started = time.monotonic()
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            launch(sleep_once_ready, args=(str(tmp_path),), num_processes=2, timeout=30)
    finally:
        stop.set()
        interrupter.join()
    elapsed = time.monotonic() - started
    # Raised afresh once everything stopped: no frame of the supervisor's, nothing chained.
    assert "every worker has been stopped" in str(caught.value)
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert not [f for f in frames if f.filename.endswith("supervisor.py")]

    assert signal.getsignal(signal.SIGINT) is handler_before
    assert elapsed < SANITY_LIMIT
    assert live_descendants() == []
    assert_relaunch_works()


def start_a_child_process(fail):
    child = subprocess.Popen(["sleep", "60"])
    print(f"started child {child.pid}", flush=True)
    if fail and os.environ["RANK"] == "1":
        raise RuntimeError("failing with a child process running")
    if fail:
        time.sleep(30)
    return child.pid


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("fail", [False, True], ids=["success", "failure"])
def test_processes_started_by_workers_are_stopped(fail):
    if fail:
        with pytest.raises(RuntimeError, match="child process running") as info:
            launch(start_a_child_process, args=(True,), num_processes=2)
        lines = info.value.launch_failure.last_lines
        pids = [int(line.rsplit(" ", 1)[1]) for line in lines if "started child" in line]
    else:
        pids = launch(start_a_child_process, args=(False,), num_processes=2).values
    assert pids
    assert all(gone(pid) for pid in pids)
