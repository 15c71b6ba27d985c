"""``%%distributed --cluster slurm`` in a real ipykernel: the cell's body runs on every rank of a
Slurm job, its output labelled in the cell, the job held across cells and given back on close."""

from __future__ import annotations

import pytest
from helpers.ranklabels import label_ranks, text_of

pytestmark = pytest.mark.kernel


def test_the_magic_runs_cells_on_a_slurm_job_until_closed(slurm, kernel):
    assert kernel.execute("%load_ext notebook_launcher\n", timeout=30).error() is None
    first = kernel.execute(
        "%%distributed -n 2 --cluster slurm\n"
        "import os\n"
        "node = os.environ['SLURMD_NODENAME']\n"
        "print('on', node)\n",
        timeout=180,
    )
    assert first.error() is None, first.output()
    lines = first.stream("stdout").splitlines()
    assert all(text_of(line) == "on n1" for line in lines), lines  # alike lines may be grouped
    assert sorted(rank for line in lines for rank in label_ranks(line)) == [0, 1], lines
    held = slurm.jobs()
    assert len(held) == 1 and "RUNNING" in held[0]
    second = kernel.execute("%%distributed\nnode, os.environ['RANK']\n", timeout=60)
    assert second.result() == "[('n1', '0'), ('n1', '1')]", second.output()
    assert slurm.jobs() == held
    closed = kernel.execute("%distributed close", timeout=60)
    assert closed.error() is None, closed.output()
    assert slurm.wait_no_jobs() == []
