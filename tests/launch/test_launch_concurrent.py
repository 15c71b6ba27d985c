"""One launch at a time per kernel: a second launch while one runs, foreground or background, is
refused at once with LaunchBusyError; the running one is not disturbed."""

from __future__ import annotations

import os
import threading
import time

import pytest

from notebook_launcher import LaunchBusyError, LaunchError, debug_launcher, launch_in_background
from notebook_launcher import notebook_launcher as launch


def sleepy(seconds):
    time.sleep(seconds)
    return int(os.environ["RANK"])


def test_a_foreground_launch_while_a_background_one_runs_is_refused():
    handle = launch_in_background(sleepy, args=(2,), num_processes=2, ui="none", timeout=60)
    try:
        started = time.monotonic()
        with pytest.raises(LaunchBusyError) as info:
            launch(sleepy, args=(0,), num_processes=2, ui="none", timeout=60)
        assert time.monotonic() - started < 1.0  # refused at once, nothing started
        assert isinstance(info.value, LaunchError)
        message = str(info.value)
        assert message.startswith("a background launch of sleepy (2 processes) is already running")
        assert "handle.wait()" in message
        with pytest.raises(LaunchBusyError):
            debug_launcher(sleepy, args=(0,), num_processes=2)
        with pytest.raises(LaunchBusyError):
            launch_in_background(sleepy, args=(0,), num_processes=2, ui="none")
    finally:
        result = handle.wait(60)
    assert result.values == [0, 1]  # the running launch was not disturbed
    # Once it ended, the kernel is free again.
    assert launch(sleepy, args=(0,), num_processes=2, ui="none", timeout=60).values == [0, 1]


def test_a_background_launch_while_a_foreground_one_runs_is_refused():
    refused = []

    def start_in_the_background():
        time.sleep(1.0)  # the foreground launch is running by then
        try:
            launch_in_background(sleepy, args=(0,), num_processes=2, ui="none")
        except LaunchBusyError as error:
            refused.append(str(error))

    thread = threading.Thread(target=start_in_the_background)
    thread.start()
    try:
        result = launch(sleepy, args=(3,), num_processes=2, ui="none", timeout=60)
    finally:
        thread.join(30)
    assert result.values == [0, 1]
    assert len(refused) == 1
    assert refused[0].startswith("a foreground launch of sleepy (2 processes) is already running")
    handle = launch_in_background(sleepy, args=(0,), num_processes=2, ui="none", timeout=60)
    assert handle.wait(60).values == [0, 1]
