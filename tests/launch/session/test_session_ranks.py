"""A session's cell on some ranks only (``Session.exec(..., ranks=...)``), and a collective in it
that waits for a rank left out, named as such."""

from __future__ import annotations

import pytest

from notebook_launcher import DeadlockError, Session

SETUP = "import torch, torch.distributed as dist\nfrom notebook_launcher import PartialState\nrank = PartialState().process_index\n"


@pytest.fixture
def session():
    with Session(num_processes=2, ui="none", stall_notice=None) as opened:
        opened.exec(SETUP)
        yield opened


def test_a_cell_on_some_ranks_only(session):
    assert session.exec("seen = rank\nrank", ranks=[1]).values == [None, 1]
    assert session.exec("'seen' in globals()").values == [False, True]


def test_a_collective_waiting_for_a_rank_left_out_is_named(session):
    with pytest.raises(DeadlockError) as caught:
        session.exec("t = torch.ones(1)\ndist.all_reduce(t)", ranks=[0], timeout=60)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "rank 1 did not run this cell (ranks=[0])" in notes, notes
    assert session.exec("rank").values == [0, 1]  # the session goes on


@pytest.mark.parametrize(
    ("ranks", "error"),
    [([], TypeError), ([2], ValueError), ([0, 0], ValueError), ("0", TypeError)],
)
def test_bad_ranks_are_refused_naming_the_parameter(session, ranks, error):
    with pytest.raises(error, match="ranks"):
        session.exec("rank", ranks=ranks)
