"""A rank's prompt where nobody can answer it, and the breakpoint hooks a rank honours: real
launches from a test process (no terminal) and from a background thread."""

from __future__ import annotations

import os
import sys

import pytest

from notebook_launcher import StdinUnavailableError, launch_in_background, notebook_launcher


def stops_on_rank_one():
    if os.environ["RANK"] == "1":
        breakpoint()
    return int(os.environ["RANK"])


def asks_on_rank_one():
    if os.environ["RANK"] == "1":
        return input("name? ")
    return None


def test_a_breakpoint_without_a_terminal_raises_a_clear_error():
    with pytest.raises(StdinUnavailableError) as caught:
        notebook_launcher(stops_on_rank_one, num_processes=2, ui="none")
    text = str(caught.value)
    assert "rank 1 entered the debugger" in text, text
    assert "standard input is not a terminal" in text and "PYTHONBREAKPOINT=0" in text, text


def test_input_without_a_terminal_raises_a_clear_error():
    with pytest.raises(StdinUnavailableError, match=r"rank 1 called input\(\), but nobody"):
        notebook_launcher(asks_on_rank_one, num_processes=2, ui="none")


def test_a_background_launch_tells_the_rank_no_cell_waits_on_it():
    handle = launch_in_background(stops_on_rank_one, num_processes=2, ui="none")
    with pytest.raises(StdinUnavailableError, match="runs in the background"):
        handle.wait(timeout=120)


def test_pythonbreakpoint_zero_skips_breakpoints(monkeypatch):
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    assert notebook_launcher(stops_on_rank_one, num_processes=2, ui="none").values == [0, 1]


def own_hook(*args, **kwargs):
    print("the user's own hook ran", flush=True)


def test_a_users_own_breakpointhook_is_kept(monkeypatch, capsys):
    monkeypatch.setattr(sys, "breakpointhook", own_hook)
    result = notebook_launcher(stops_on_rank_one, num_processes=2, ui="none")
    assert result.values == [0, 1]
    assert "[rank1] the user's own hook ran" in capsys.readouterr().out
