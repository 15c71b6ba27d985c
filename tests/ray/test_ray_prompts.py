"""A rank's breakpoint on the two-node Ray cluster: its prompt reaches the kernel over the rank's
socket and the answer goes back the same way; where nobody can answer, the rank raises."""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest
from helpers.raycluster import SLOTS, START

from notebook_launcher import RayCluster, StdinUnavailableError, notebook_launcher
from notebook_launcher.launch.supervision import supervisor
from notebook_launcher.launch.supervision.prompting import Answerer

cloudpickle.register_pickle_by_value(sys.modules[__name__])
ON_TWO_NODES = RayCluster(resources_per_process=SLOTS, timeout=START)


def stops_on_rank_one():
    rank = int(os.environ["RANK"])
    x = rank * 10
    if rank == 1:
        breakpoint()
    return x + 1


def ipdb_on_rank_one():
    rank = int(os.environ["RANK"])
    x = rank * 10
    if rank == 1:
        import ipdb

        ipdb.set_trace()
    return x + 1


@pytest.mark.parametrize(
    ("function", "prompt"),
    [(stops_on_rank_one, "(Pdb rank 1) "), (ipdb_on_rank_one, "ipdb rank 1> ")],
    ids=["breakpoint", "ipdb"],
)
def test_a_ray_ranks_breakpoint_is_answered_by_the_kernel(
    cluster, monkeypatch, capsys, function, prompt
):
    lines = iter(["p x", "c"])
    asked = []

    def typed(prompt: str, password: bool) -> str:
        asked.append(prompt)
        return next(lines)

    monkeypatch.setattr(supervisor, "cell_answerer", lambda: Answerer(typed))
    result = notebook_launcher(function, num_processes=2, cluster=ON_TWO_NODES, ui="none")
    assert result.values == [1, 11]
    assert asked == [prompt, prompt]
    assert "[rank1] 10" in capsys.readouterr().out.splitlines()


def test_a_ray_ranks_breakpoint_without_a_terminal_raises(cluster):
    with pytest.raises(StdinUnavailableError, match="rank 1 entered the debugger"):
        notebook_launcher(stops_on_rank_one, num_processes=2, cluster=ON_TWO_NODES, ui="none")
