"""Stopping ranks gracefully: a rank the launcher stops gets KeyboardInterrupt first, so its
``finally`` blocks, ``except KeyboardInterrupt`` handlers and ``atexit`` handlers run; a rank that
does not exit within ``stop_grace`` is killed, and the error still arrives."""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from notebook_launcher import (
    LaunchTimeoutError,
    PartialState,
    WorkersFailedError,
    notebook_launcher,
)

SANITY_LIMIT = 10.0  # seconds for a whole stop; generous, not a performance target


def _mark(folder: str, what: str) -> None:
    Path(folder, f"{what}-{os.environ['RANK']}").write_text("done")


def _marks(folder: Path, what: str) -> set[int]:
    return {int(p.name.rsplit("-", 1)[1]) for p in folder.glob(f"{what}-*")}


def fails_while_peer_waits(folder):
    state = PartialState()
    atexit.register(_mark, folder, "atexit")
    try:
        if state.process_index == 1:
            time.sleep(0.5)
            raise ValueError("rank 1 failed on purpose")
        time.sleep(3600)  # rank 0: stopped because rank 1 failed
    finally:
        _mark(folder, "finally")


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_rank_stopped_because_its_peer_failed_runs_finally_and_atexit(tmp_path, start_method):
    started = time.monotonic()
    with pytest.raises(ValueError, match="rank 1 failed on purpose"):
        notebook_launcher(
            fails_while_peer_waits,
            args=(str(tmp_path),),
            num_processes=2,
            start_method=start_method,
        )
    assert time.monotonic() - started < SANITY_LIMIT + (10 if start_method == "spawn" else 0)
    assert _marks(tmp_path, "finally") == {0, 1}
    assert _marks(tmp_path, "atexit") == {0, 1}


def sleeps_with_cleanup(folder):
    PartialState()
    try:
        time.sleep(3600)
    except KeyboardInterrupt:
        _mark(folder, "saved")  # a save-on-interrupt
        raise
    finally:
        _mark(folder, "finally")


def test_ranks_stopped_by_a_timeout_run_their_clean_up(tmp_path):
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(sleeps_with_cleanup, args=(str(tmp_path),), num_processes=2, timeout=3)
    assert time.monotonic() - started < 3 + SANITY_LIMIT
    assert _marks(tmp_path, "saved") == {0, 1}
    assert _marks(tmp_path, "finally") == {0, 1}


def ignores_the_stop(folder):
    PartialState()
    if int(os.environ["RANK"]) == 1:
        time.sleep(0.5)
        raise RuntimeError("rank 1 failed")
    while True:  # swallows every KeyboardInterrupt: only SIGKILL ends it
        try:
            time.sleep(3600)
        except KeyboardInterrupt:
            _mark(folder, "interrupted")


def test_a_rank_that_ignores_the_stop_is_killed_after_the_grace(tmp_path):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 failed"):
        notebook_launcher(ignores_the_stop, args=(str(tmp_path),), num_processes=2, stop_grace=1)
    elapsed = time.monotonic() - started
    assert _marks(tmp_path, "interrupted") == {0}  # it got the catchable signal first
    assert 1.0 <= elapsed < 1.0 + SANITY_LIMIT  # the no_leaks fixture checks it is gone


def _stopped_while_leaving(folder):
    """An exit handler that gets the kernel's stop signal while it runs, as a rank does that the
    kernel stops while it tears its process group down (slow on a busy machine)."""
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
    time.sleep(0.3)
    _mark(folder, "left")


def leaves_slowly(folder, failing_rank):
    state = PartialState()
    atexit.register(_stopped_while_leaving, folder)
    if state.process_index == failing_rank:
        raise ValueError(f"rank {failing_rank} failed on purpose")
    return state.process_index


class SlowToReport(ValueError):
    """An exception that takes a while to pickle, as one with a long traceback does on a busy
    machine: the kernel's stop signal arrives while the rank reports it."""

    def __reduce__(self):
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(0.3)
        return (type(self), self.args)


def reports_slowly():
    if PartialState().process_index == 1:
        raise SlowToReport("rank 1 failed on purpose")


def test_a_rank_stopped_while_it_reports_its_failure_still_reports_it_quietly(capsys):
    with pytest.raises(SlowToReport, match="rank 1 failed on purpose"):
        notebook_launcher(reports_slowly, num_processes=2)
    shown = capsys.readouterr()
    assert "Traceback" not in shown.err and "RankStopped" not in shown.err, shown.err


@pytest.mark.parametrize("failing_rank", [None, 1])
def test_a_rank_stopped_once_its_function_ended_leaves_quietly(tmp_path, capsys, failing_rank):
    if failing_rank is None:
        result = notebook_launcher(leaves_slowly, args=(str(tmp_path), None), num_processes=2)
        assert result.values == [0, 1]
        assert _marks(tmp_path, "left") == {0, 1}  # the stop cut no exit handler short
    else:
        with pytest.raises(ValueError, match="rank 1 failed on purpose"):
            notebook_launcher(leaves_slowly, args=(str(tmp_path), 1), num_processes=2)
        assert 1 in _marks(tmp_path, "left")
    shown = capsys.readouterr()
    assert "Traceback" not in shown.err and "RankStopped" not in shown.err, shown.err


def stopped_by_someone_else(folder):
    try:
        if PartialState().process_index == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill`, a scheduler or a node shutting down
        time.sleep(3600)
    finally:
        _mark(folder, "finally")


def test_a_stop_signal_the_launcher_did_not_send_is_named_as_such(tmp_path):
    with pytest.raises(WorkersFailedError) as raised:
        notebook_launcher(stopped_by_someone_else, args=(str(tmp_path),), num_processes=2)
    text = str(raised.value)
    assert "rank 1 " in text and "SIGTERM the launcher did not send" in text, text
    assert "Stopped because of this failure: rank 0" in text
    assert _marks(tmp_path, "finally") == {0, 1}  # both still ran their clean-up


@pytest.mark.parametrize("value", [0, -1, 61, float("nan"), None, "3", True])
def test_stop_grace_rejects_bad_values(value):
    with pytest.raises((TypeError, ValueError), match=r"stop_grace=.*seconds > 0"):
        notebook_launcher(print, num_processes=1, stop_grace=value)
