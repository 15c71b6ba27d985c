"""A rank at a prompt reads "in debugger" (or "waiting for input") in the status table until the
cell answers it."""

from __future__ import annotations

import time

from notebook_launcher.protocol.events import SupervisorTick, WorkerStarted
from notebook_launcher.protocol.prompts import DEBUGGER, INPUT, InputRequest, PromptAnswered
from notebook_launcher.ui.model import RunModel
from notebook_launcher.ui.render import status_text


def started(model: RunModel) -> None:
    for rank in range(2):
        model.apply(WorkerStarted(rank, 100 + rank, time.time()))


def test_a_rank_at_a_debugger_prompt_reads_in_debugger_until_answered():
    model = RunModel(2)
    started(model)
    model.apply(InputRequest(1, "(Pdb) ", DEBUGGER))
    assert model.ranks[1].notice == "in debugger"
    assert "in debugger" in status_text(model, time.monotonic())
    model.apply(SupervisorTick(time.monotonic() + 10, ((1, time.monotonic() + 10),)))
    assert model.ranks[1].notice == "in debugger"  # signs of life do not end it
    model.apply(PromptAnswered(1))
    assert model.ranks[1].notice == ""
    assert model.ranks[0].notice == ""


def test_a_rank_asking_for_input_reads_waiting_for_input():
    model = RunModel(2)
    started(model)
    model.apply(InputRequest(0, "name? ", INPUT))
    assert model.ranks[0].notice == "waiting for input"


def test_the_state_badge_of_a_rank_at_a_prompt_says_so_and_is_not_running():
    from notebook_launcher.ui.render import status_html

    model = RunModel(2)
    started(model)
    model.apply(InputRequest(1, "(Pdb) ", DEBUGGER))
    model.apply(SupervisorTick(time.monotonic(), ()))
    page = status_html(model, time.monotonic())
    row = page[page.index('data-rank="1"') :]
    row = row[: row.index("</tr>")]
    assert ">in debugger</span>" in row and ">running</span>" not in row
    assert row.count("in debugger") == 1  # the badge alone: the details do not repeat it
    model.apply(PromptAnswered(1))
    page = status_html(model, time.monotonic())
    row = page[page.index('data-rank="1"') :]
    assert ">running</span>" in row[: row.index("</tr>")]
