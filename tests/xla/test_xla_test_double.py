"""What only the test double can show on a CPU: several replica *processes* (as on TPU v4
hosts), so fail fast, crashes and exit codes across processes."""

from __future__ import annotations

import os
import time

import pytest

from notebook_launcher import WorkersFailedError, notebook_launcher

pytestmark = pytest.mark.skipif(
    os.environ.get("NOTEBOOK_LAUNCHER_XLA_LANE") == "real",
    reason="the real torch_xla starts one CPU process",
)


@pytest.fixture
def two_processes(monkeypatch):
    monkeypatch.setenv("FAKE_XLA_PROCESSES", "2")
    monkeypatch.setenv("CPU_NUM_DEVICES", "2")


def pids():
    from notebook_launcher import PartialState

    return PartialState().process_index, os.getpid()


def test_replica_processes_are_separate(two_processes):
    values = notebook_launcher(pids, ui="none").values
    assert [rank for rank, _ in values] == [0, 1] and values[0][1] != values[1][1]


def one_fails_one_hangs():
    from notebook_launcher import PartialState

    if PartialState().process_index == 1:
        raise KeyError("missing column")
    time.sleep(60)


def test_fail_fast_across_replica_processes(two_processes):
    started = time.monotonic()
    with pytest.raises(KeyError, match="missing column"):
        notebook_launcher(one_fails_one_hangs, ui="none")
    assert time.monotonic() - started < 15


def crashes():
    from notebook_launcher import PartialState

    if PartialState().process_index == 0:
        os._exit(7)
    time.sleep(60)


def test_a_crashed_replica_is_reported_with_its_exit_code(two_processes):
    with pytest.raises(WorkersFailedError, match="exit code 7"):
        notebook_launcher(crashes, ui="none")


def test_thread_replicas_keep_separate_state(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "3")
    values = notebook_launcher(pids, ui="none").values
    assert [rank for rank, _ in values] == [0, 1, 2] and len({pid for _, pid in values}) == 1


def sleeps():
    time.sleep(60)


def test_timeout_stops_every_replica(two_processes):
    from notebook_launcher import LaunchTimeoutError

    with pytest.raises(LaunchTimeoutError):
        notebook_launcher(sleeps, timeout=3, ui="none")
