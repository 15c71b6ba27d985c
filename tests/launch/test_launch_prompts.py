"""A rank's prompt where nobody can answer it, and the breakpoint hooks a rank honours: real
launches from a test process (no terminal) and from a background thread."""

from __future__ import annotations

import os
import pdb
import sys
import time

import pytest

from notebook_launcher import StdinUnavailableError, launch_in_background, notebook_launcher
from notebook_launcher.launch.supervision import supervisor
from notebook_launcher.launch.supervision.prompting import Answerer


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


def scripted(monkeypatch, lines: list[str]) -> list[str]:
    """The cell's answers: ``lines`` in turn; the prompts asked, in order."""
    answers, asked = iter(lines), []

    def typed(prompt: str, password: bool) -> str:
        asked.append(prompt)
        return next(answers)

    monkeypatch.setattr(supervisor, "cell_answerer", lambda: Answerer(typed))
    return asked


def walks(n):
    total = 0
    for i in range(n):
        total += helper(i)
    return total


def helper(i):
    doubled = i * 2
    return doubled


def debugged():
    if os.environ["RANK"] == "1":
        pdb.set_trace()
    return walks(3)


def test_pdb_commands_on_a_rank(monkeypatch, capsys):
    asked = scripted(
        monkeypatch,
        [
            "ll",  # the function's source
            f"b {helper.__code__.co_firstlineno + 2}",  # a breakpoint in helper's return
            "c",
            "p doubled",
            "!doubled = 100",  # a statement changes a local: helper(0) returns 100
            "r",  # to helper's return
            "interact",
            "print('inside', i)",
            "EOF",  # leaves interact
            "cl 1",
            "c",
        ],
    )
    result = notebook_launcher(debugged, num_processes=2, ui="none")
    out = capsys.readouterr().out
    assert result.values == [6, 100 + 2 + 4], out
    assert asked[0] == "(Pdb rank 1) " and "[rank 1] >>> " in asked, asked
    lines = out.splitlines()
    assert any("pdb.set_trace()" in line and line.startswith("[rank1]") for line in lines), out
    assert "[rank1] 0" in lines and "[rank1] inside 0" in lines, out


def waits_for_rank_one():
    from notebook_launcher import PartialState

    state = PartialState()
    if state.process_index == 1:
        breakpoint()
    state.wait_for_everyone()  # rank 0 waits here for rank 1, at its prompt
    return state.process_index


def test_time_at_a_prompt_counts_toward_no_limit(monkeypatch, capsys):
    def slow(prompt: str, password: bool) -> str:
        time.sleep(6.0)  # longer than every limit below
        return "c"

    monkeypatch.setattr(supervisor, "cell_answerer", lambda: Answerer(slow))
    result = notebook_launcher(
        waits_for_rank_one,
        num_processes=2,
        ui="none",
        stall_notice=1.0,
        stall_timeout=2.0,
        timeout=5.0,
    )
    assert result.values == [0, 1]
    captured = capsys.readouterr()
    assert "no rank has made progress" not in captured.out + captured.err
