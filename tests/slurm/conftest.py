"""A real two-node Slurm cluster on this machine (munged, slurmctld, slurmd n1 and n2, all on
127.0.0.1), shared by the Slurm lane: started for its first test, stopped (by PID) after its last.

The kernel (this test process) is where the launch starts, as a notebook's kernel on a login node
would be. After each test nothing of a launch may be left: no job or job step in ``squeue``, no
process of ours but the cluster's daemons, no listening socket of this process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers import slurmcluster
from helpers.lanes import lane_ends, mark_lane
from helpers.processtree import listening, live_descendants

HERE = Path(__file__).resolve().parent
LANE_TIMEOUT = 300  # seconds one test of the lane may take
SETTLE = 15.0  # seconds the cluster gets to show a launch's job gone
_running: list = []


def pytest_collection_modifyitems(config, items):
    mark_lane(items, HERE, LANE_TIMEOUT)


@pytest.fixture
def slurm():
    """The lane's cluster (a :class:`helpers.slurmcluster.LocalSlurm`), both nodes idle."""
    reason = slurmcluster.missing()
    if reason is not None:
        pytest.skip(reason)
    if not _running:
        _running.append(slurmcluster.start())
    cluster = _running[0]
    cluster.wait_idle()
    return cluster


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the lane's last test: stop the cluster's daemons."""
    if _running and lane_ends(nextitem, HERE):
        _running.pop().stop()
        os.environ.pop("SLURM_CONF", None)


def _daemon(proc, pids: set[int]) -> bool:
    """Whether ``proc`` is one of the cluster's daemons, or slurmctld's script helper."""
    try:
        return proc.pid in pids or (proc.name() == "slurmscriptd" and proc.ppid() in pids)
    except Exception:  # gone meanwhile
        return True


@pytest.fixture(autouse=True)
def no_leaks(slurm):
    """Replaces the suite's check (the cluster's daemons are this process's children): after
    each test no job or step of ours in squeue, no other process of ours, no listener."""
    before = listening()
    yield
    left = slurm.wait_no_jobs(SETTLE)
    assert not left, f"jobs left in squeue: {left}"
    deadline = time.monotonic() + SETTLE
    while True:
        strays = [p for p in live_descendants() if not _daemon(p, slurm.pids)]
        if not strays or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for proc in strays:
        proc.kill()
    assert not strays, f"processes left: {[(p.pid, p.cmdline()) for p in strays]}"
    new = listening() - before
    assert not new, f"sockets left listening in the kernel: {sorted(new)}"
