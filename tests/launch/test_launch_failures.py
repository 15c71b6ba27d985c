"""A failing rank: what the caller gets, how fast, and that the next launch still works."""

from __future__ import annotations

import ctypes
import os
import pickle
import re
import signal
import sys
import time

import pytest

from notebook_launcher import PartialState, WorkerFailure, WorkersFailedError
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.launch.errors import RemoteTraceback

SANITY_LIMIT = 10.0  # seconds; a generous bound, not a performance target


def ranks():
    return int(os.environ["RANK"])


def assert_relaunch_works():
    assert launch(ranks, num_processes=2).values == [0, 1]


def notes_of(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


def raise_on_rank_1(message):
    state = PartialState()
    print(f"rank {state.process_index} has pid {os.getpid()}")
    if state.process_index == 1:
        print("about to fail")
        raise ValueError(message)
    state.wait_for_everyone()  # rank 0 would wait here forever without the supervisor
    return "rank 0 was not stopped"


def test_exception_is_rebuilt_with_its_own_type_and_rank_details():
    started = time.monotonic()
    with pytest.raises(ValueError, match="bad learning rate on rank 1") as info:
        launch(raise_on_rank_1, args=("bad learning rate on rank 1",), num_processes=2)
    elapsed = time.monotonic() - started

    error = info.value
    assert type(error) is ValueError
    failure = error.launch_failure
    assert isinstance(failure, WorkerFailure)
    assert failure.rank == 1
    assert failure.local_rank == 1
    assert failure.exitcode == 1
    assert failure.exc_type == "builtins.ValueError"
    assert failure.pid is not None and failure.pid != os.getpid()
    assert f"[rank1] rank 1 has pid {failure.pid}" in failure.last_lines
    assert failure.last_lines[-1] == "[rank1] about to fail"

    notes = notes_of(error)
    assert f"rank 1 (local rank 1, pid {failure.pid}) failed with exit code 1" in notes
    assert "ValueError: bad learning rate on rank 1" in notes
    assert "Stopped because of this failure: rank 0." in notes
    assert "rank 0 (local rank 0" not in notes  # rank 0 was stopped, it did not fail
    assert "[rank1] about to fail" not in notes  # the lines are in the cause, shown everywhere

    # The cause carries the whole report: IPython before 8.15 does not show notes.
    cause = error.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert f"rank 1 (local rank 1, pid {failure.pid}) failed with exit code 1" in cause.text
    assert "Stopped because of this failure: rank 0." in cause.text
    assert "Last lines printed by rank 1:" in cause.text
    assert "[rank1] about to fail" in cause.text
    assert "in raise_on_rank_1" in cause.text
    assert "raise ValueError(message)" in cause.text
    assert "ValueError: bad learning rate on rank 1" in cause.text

    print(f"failure reported after {elapsed:.2f} s")
    assert elapsed < SANITY_LIMIT
    assert_relaunch_works()


class LaunchSpecificError(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


def test_ipython_shows_the_report_without_the_launchers_frames_and_the_error_still_pickles():
    with pytest.raises(ValueError) as info:
        launch(raise_on_rank_1, args=("bad batch",), num_processes=2)
    error = info.value
    shown = error._render_traceback_()  # what IPython calls instead of formatting frames
    assert shown[0] == "ValueError: bad batch"  # no colours outside IPython
    text = "\n".join(shown)
    assert text.count("Stopped because of this failure: rank 0.") == 1
    assert "in raise_on_rank_1" in text and "raise ValueError(message)" in text
    assert "notebook_launcher/" not in text  # the kernel's and the worker bootstrap's frames
    assert "in test_ipython_shows_the_report" in text.split("Raised where the launch")[1]
    copy = pickle.loads(pickle.dumps(error))
    assert copy._render_traceback_()[0] == "ValueError: bad batch"

    with pytest.raises(WorkersFailedError) as info:
        launch(exit_3_on_rank_1, num_processes=2)
    shown = "\n".join(info.value._render_traceback_())
    assert shown.startswith("WorkersFailedError: rank 1 (local rank 1, pid ")
    assert "notebook_launcher/" not in shown


@pytest.mark.parametrize("settings", [{"num_processes": 0}, {"mixed_precision": "fp99"}])
def test_argument_errors_show_no_generated_frames(settings):
    with pytest.raises(ValueError) as info:
        launch(print, **settings)
    shown = "\n".join(info.value._render_traceback_())
    assert shown.startswith("ValueError: "), shown
    assert "<string>" not in shown and "notebook_launcher/" not in shown, shown
    assert "in test_argument_errors_show_no_generated_frames" in shown, shown


def raise_custom():
    if os.environ["RANK"] == "0":
        raise LaunchSpecificError(42, "custom detail")
    PartialState().wait_for_everyone()


def test_custom_exception_keeps_type_and_attributes():
    with pytest.raises(LaunchSpecificError) as info:
        launch(raise_custom, num_processes=2)

    assert info.value.code == 42
    assert info.value.detail == "custom detail"
    assert info.value.launch_failure.rank == 0
    assert "Stopped because of this failure: rank 1." in notes_of(info.value)
    assert_relaunch_works()


def test_exception_class_defined_in_main_can_be_caught(monkeypatch):
    """An exception class defined in a notebook cell lives in ``__main__``; ``except`` must work."""

    class NotebookError(Exception):
        pass

    NotebookError.__module__ = "__main__"
    NotebookError.__qualname__ = "NotebookError"
    monkeypatch.setattr(sys.modules["__main__"], "NotebookError", NotebookError, raising=False)

    def train():
        raise NotebookError(f"from rank {os.environ['RANK']}")

    with pytest.raises(NotebookError, match="from rank"):
        launch(train, num_processes=2)
    assert_relaunch_works()


class UnpicklableError(Exception):
    def __reduce__(self):
        raise TypeError("this exception refuses to be pickled")


def raise_unpicklable():
    if os.environ["RANK"] == "1":
        raise UnpicklableError("cannot rebuild me")
    PartialState().wait_for_everyone()


def test_exception_that_cannot_be_pickled_gives_workers_failed_error():
    with pytest.raises(WorkersFailedError) as info:
        launch(raise_unpicklable, num_processes=2)

    error = info.value
    assert error.failure.rank == 1
    assert error.failure.exc_type.endswith("UnpicklableError")
    assert error.failure.message == "cannot rebuild me"
    assert error.stopped == (0,)
    text = str(error)
    assert "rank 1 (local rank 1, pid" in text
    assert "UnpicklableError: cannot rebuild me" in text
    assert "Traceback of rank 1:" in text
    assert "in raise_unpicklable" in text
    assert error.__cause__ is None  # the message already holds the whole report
    assert_relaunch_works()


def exit_3_on_rank_1():
    if os.environ["RANK"] == "1":
        print("leaving with os._exit", flush=True)
        os._exit(3)
    PartialState().wait_for_everyone()


def test_os_exit_names_the_exit_code():
    with pytest.raises(WorkersFailedError) as info:
        launch(exit_3_on_rank_1, num_processes=2)

    failure = info.value.failure
    assert failure.rank == 1
    assert failure.exitcode == 3
    assert failure.exc_type is None
    assert "rank 1 (local rank 1, pid" in str(info.value)
    assert "died with exit code 3" in str(info.value)
    assert "[rank1] leaving with os._exit" in failure.last_lines
    assert info.value.stopped == (0,)
    assert_relaunch_works()


def sigkill_on_rank_1():
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    PartialState().wait_for_everyone()


def test_sigkill_names_the_signal():
    with pytest.raises(WorkersFailedError) as info:
        launch(sigkill_on_rank_1, num_processes=2)

    assert info.value.failure.rank == 1
    assert info.value.failure.exitcode == -signal.SIGKILL
    assert "died with signal SIGKILL" in str(info.value)
    assert_relaunch_works()


def segfault_on_rank_1():
    if os.environ["RANK"] == "1":
        print("about to crash", flush=True)
        ctypes.string_at(0)
    PartialState().wait_for_everyone()


def test_segfault_names_sigsegv_and_shows_faulthandler_output():
    with pytest.raises(WorkersFailedError) as info:
        launch(segfault_on_rank_1, num_processes=2)

    failure = info.value.failure
    assert failure.rank == 1
    assert failure.exitcode == -signal.SIGSEGV
    assert "died with signal SIGSEGV" in str(info.value)
    last = "\n".join(failure.last_lines)
    # faulthandler's dump ends with the extension module list, after the stack it printed
    assert "[rank1] Extension modules:" in last
    assert re.search(r"\[rank1\]   File \".*\", line \d+ in \w+", last)
    assert "Last lines printed by rank 1:" in str(info.value)
    assert_relaunch_works()


def test_segfault_report_shows_the_crash_site():
    with pytest.raises(WorkersFailedError) as info:
        launch(segfault_on_rank_1, num_processes=2)

    last = info.value.failure.traceback
    assert "Fatal Python error: Segmentation fault" in last
    assert "Crash report of rank 1:" in str(info.value)
    assert "in segfault_on_rank_1" in last  # the crashing frame, kept despite a deep stack
    assert "in segfault_on_rank_1" in str(info.value)


def sys_exit_zero():
    sys.exit(0)


def sys_exit_none():
    sys.exit()


@pytest.mark.parametrize("function", [sys_exit_zero, sys_exit_none])
def test_sys_exit_success_counts_as_returning_none(function):
    result = launch(function, num_processes=2)

    assert result.values == [None, None]
    assert result.returned_nothing


def sys_exit_two_on_rank_1():
    if PartialState().process_index == 1:
        sys.exit(2)
    PartialState().wait_for_everyone()


def test_nonzero_sys_exit_is_a_launch_failure_not_an_exit_of_the_caller():
    # Re-raising SystemExit in the caller would end a script silently and lose the details.
    with pytest.raises(WorkersFailedError) as info:
        launch(sys_exit_two_on_rank_1, num_processes=2)

    failure = info.value.failure
    assert failure.rank == 1
    assert failure.exitcode == 2
    assert failure.exc_type.endswith("SystemExit")
    assert "exit code 2" in str(info.value)
