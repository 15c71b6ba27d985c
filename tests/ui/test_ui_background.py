"""Launching in the background: the kernel stays free, stop() tears everything down."""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from notebook_launcher import (
    LaunchHandle,
    LaunchStoppedError,
    launch_in_background,
    log,
    notebook_launcher,
)


def quick(x):
    return int(os.environ["RANK"]) * x


def sleepy(seconds):
    for step in range(int(seconds * 20)):
        log({"alive": 1.0}, step=step)
        time.sleep(0.05)
    return "woke up"


def fails_on_rank_1():
    if os.environ["RANK"] == "1":
        raise KeyError("missing")
    time.sleep(30)


def test_wait_returns_the_result_and_the_handle_says_so():
    handle = launch_in_background(quick, args=(10,), num_processes=2, ui="none")
    assert isinstance(handle, LaunchHandle)
    result = handle.wait(60)
    assert result.values == [0, 10]
    assert handle.done and handle.result is result and handle.exception is None
    assert handle.status == "finished"
    assert repr(handle) == "LaunchHandle(finished, 2 processes)"
    assert result.panel.model.counts() == {"finished": 2}


def test_launching_returns_at_once_while_the_workers_run():
    started = time.monotonic()
    handle = launch_in_background(sleepy, args=(3,), num_processes=2, ui="none")
    assert time.monotonic() - started < 2.0
    assert not handle.done and handle.status == "running" and handle.result is None
    with pytest.raises(TimeoutError, match="still runs after 0.1 s"):
        handle.wait(0.1)
    assert handle.wait(60).values == ["woke up", "woke up"]


def test_stop_while_running_stops_every_worker_and_frees_everything():
    handle = launch_in_background(sleepy, args=(60,), num_processes=2, ui="none")
    deadline = time.monotonic() + 30
    while len(_logged(handle)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # both ranks are in the function
    pids = [state.pid for state in handle.model.ranks]
    started = time.monotonic()
    assert handle.stop(timeout=15)
    assert time.monotonic() - started < 5
    assert handle.status == "stopped" and handle.result is None
    assert isinstance(handle.exception, LaunchStoppedError)
    with pytest.raises(LaunchStoppedError, match="stopped on request"):
        handle.wait(1)
    assert [state.state for state in handle.model.ranks] == ["stopped", "stopped"]
    assert handle.model.ranks[0].stop_reason == "stop requested"
    assert not [p for p in pids if psutil.pid_exists(p) and _alive(p)]
    assert not [t for t in threading.enumerate() if t.name == "notebook_launcher-supervisor"]
    # and the next launch works at once
    assert notebook_launcher(quick, args=(1,), num_processes=2, ui="none").values == [0, 1]


def _logged(handle: LaunchHandle) -> list[int]:
    with handle.model.lock:
        series = handle.model.metrics.get("alive")
        return list(series.per_rank) if series else []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_stop_after_the_end_is_harmless():
    handle = launch_in_background(quick, args=(1,), num_processes=2, ui="none")
    handle.wait(60)
    assert handle.stop() is True
    assert handle.status == "finished"


def test_a_failure_is_raised_by_wait_and_kept_on_the_handle():
    handle = launch_in_background(fails_on_rank_1, num_processes=2, ui="none")
    with pytest.raises(KeyError, match="missing"):
        handle.wait(60)
    assert handle.status == "failed" and isinstance(handle.exception, KeyError)
    assert [s.state for s in handle.model.ranks] == ["stopped", "failed"]


def test_done_callbacks_run_once_when_the_run_ends():
    seen = []
    handle = launch_in_background(quick, args=(1,), num_processes=2, ui="none")
    handle.add_done_callback(lambda h: seen.append(h.status))
    handle.wait(60)
    handle.add_done_callback(lambda h: seen.append("late"))
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == ["finished", "late"]


def test_bad_settings_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="num_processes=0 is not valid"):
        launch_in_background(quick, num_processes=0)
    with pytest.raises(ValueError, match="ui='fancy' is not valid"):
        launch_in_background(quick, num_processes=2, ui="fancy")
    with pytest.raises(TypeError, match="colour"):
        launch_in_background(quick, num_processes=2, colour="red")
    with pytest.raises(TypeError, match="function=3 is not valid"):
        launch_in_background(3, num_processes=2)
    handle = launch_in_background(quick, args=(1,), num_processes=2, ui="none")
    for bad in (-1, "1", True):
        with pytest.raises(ValueError, match="timeout="):
            handle.wait(bad)
    handle.wait(60)


def test_console_status_of_a_successful_background_run_goes_to_stdout_in_whole_tables(capfd):
    handle = launch_in_background(sleepy, args=(0.5,), num_processes=2, ui="console")
    handle.wait(60)
    captured = capfd.readouterr()
    assert captured.out.startswith("notebook_launcher: 2 ranks · 2 finished")
    assert "notebook_launcher:" not in captured.err  # status is no error


def test_console_status_of_a_failed_run_goes_to_stderr(capfd):
    def fails_after_logging():
        log({"alive": 1.0}, step=0)
        fails_on_rank_1()

    handle = launch_in_background(fails_after_logging, num_processes=2, ui="console")
    with pytest.raises(KeyError):
        handle.wait(60)
    captured = capfd.readouterr()
    assert "notebook_launcher: 2 ranks · 1 failed, 1 stopped" in captured.err
    assert "  rank 1   failed     step 0  KeyError: 'missing'" in captured.err
    assert "notebook_launcher:" not in captured.out
