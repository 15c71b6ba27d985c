"""A rank quiet for ``stall_notice`` seconds is named in the cell and the status table, with where
each rank is, once per quiet spell; nothing is stopped."""

from __future__ import annotations

import os
import re
import threading
import time

from notebook_launcher import notebook_launcher, plan_launch
from notebook_launcher.launch.supervision.runner import launch
from notebook_launcher.protocol.events import OutputLine, RankQuiet, SupervisorTick
from notebook_launcher.protocol.names import STACK_DUMP_SIGNAL
from notebook_launcher.ui.model import RunModel
from notebook_launcher.ui.render import status_text


def quiet_rank():
    rank = int(os.environ["RANK"])
    if rank == 1:
        time.sleep(4)  # no output, no CPU: quiet for 4 s
    return rank


def _run(stall_notice):
    events, notices = [], []
    model = RunModel(2)

    def listen(event):
        events.append(event)
        model.apply(event)
        if isinstance(event, RankQuiet):
            notices.append(model.ranks[event.rank].notice)

    plan = plan_launch(
        num_processes=2, stall_notice=stall_notice, stall_timeout=30, timeout=60, ui="none"
    )
    result = launch(quiet_rank, (), plan, listeners=(listen,))
    return result, [e for e in events if isinstance(e, RankQuiet)], notices


def test_a_quiet_rank_is_noticed_once_and_the_run_goes_on(capfd):
    result, quiet, notices = _run(stall_notice=1.0)

    assert result.values == [0, 1]  # nothing was stopped
    assert [event.rank for event in quiet] == [1]  # once for the spell, not every check
    assert quiet[0].quiet_for >= 1.0
    assert quiet[0].where.startswith("in quiet_rank (")
    assert re.match(r"no progress for \d+ s — in quiet_rank \(", notices[0])
    err = capfd.readouterr().err
    assert "notebook_launcher: no rank has made progress for 1 s" in err
    assert "rank 1 is where the job is stuck. Nothing was stopped (stall_timeout=30 s" in err
    assert "Where each rank was: rank 1 was in quiet_rank (" in err


def test_stall_notice_none_says_nothing(capfd):
    result, quiet, _ = _run(stall_notice=None)

    assert result.values == [0, 1]
    assert quiet == []
    assert "made progress" not in capfd.readouterr().err


def test_the_model_shows_the_notice_until_the_rank_shows_life():
    model = RunModel(2)
    model.apply(RankQuiet(1, 61.2, "in train (Cell In[3]:5)", since=10.0), now=71.2)

    assert model.ranks[1].notice == "no progress for 61 s — in train (Cell In[3]:5)"
    assert "no progress for 61 s — in train (Cell In[3]:5)" in status_text(model, 72.0)
    model.apply(SupervisorTick(72.0, ((0, 72.0), (1, 10.0))), now=72.0)
    assert model.ranks[1].notice  # still quiet
    model.apply(OutputLine(1, "stdout", "step 5"), now=73.0)
    model.apply(SupervisorTick(73.0, ((0, 73.0), (1, 73.0))), now=73.0)
    assert model.ranks[1].notice == ""


_ASK_AT_FORK = threading.Event()


def _ask_for_a_stack_at_once() -> None:
    """In a child just forked: a stack request before anything else runs there."""
    if _ASK_AT_FORK.is_set():
        os.kill(os.getpid(), STACK_DUMP_SIGNAL)


os.register_at_fork(after_in_child=_ask_for_a_stack_at_once)


def _sum_of_ranks():
    import torch
    import torch.distributed as dist

    from notebook_launcher import PartialState

    t = torch.tensor([float(PartialState().process_index)])
    dist.all_reduce(t)
    return t.item()


def test_a_stack_request_at_a_workers_first_moment_does_not_kill_it(capfd):
    # Under load the stall watchdog may ask a rank for its stack before its bootstrap has set
    # up the handler (whose default action ends the process): the request must be dropped.
    _ASK_AT_FORK.set()
    try:
        result = notebook_launcher(_sum_of_ranks, num_processes=2, ui="none")
    finally:
        _ASK_AT_FORK.clear()
    assert result.values == [1.0, 1.0]
    assert "Stack" not in capfd.readouterr().err  # a dropped request prints nothing
