"""A launch's Slurm job in the queue and while it runs, as the live view shows it: its id, state,
Slurm's reason and expected start while it waits, its time left once it runs; a background
launch stopped while its job waits cancels the job."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from notebook_launcher import LaunchStoppedError, SlurmCluster, launch_in_background
from notebook_launcher.ui.render import status_html, status_text

cloudpickle.register_pickle_by_value(sys.modules[__name__])
LIMITED = SlurmCluster(nodes=2, time="00:09:00", kernel_address="127.0.0.1", timeout=120)
WAIT = 60.0  # seconds a test waits for the queue to show something


def until_go(folder: str):
    deadline = time.monotonic() + 60
    while not Path(folder, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return os.environ["SLURMD_NODENAME"]


def _block_both_nodes(slurm) -> str:
    """A job holding every CPU of both nodes: a launch's job waits for Resources."""
    return slurm.run(
        "sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"
    ).strip()


def _await(check, what: str, limit: float = WAIT):
    deadline = time.monotonic() + limit
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {limit:g} s"
        time.sleep(0.1)


def _ours(slurm) -> list[str]:
    return [line.split()[0] for line in slurm.jobs() if line.endswith("notebook_launcher")]


def test_the_view_shows_the_queued_job_then_its_time_left(slurm, tmp_path):
    blocker = _block_both_nodes(slurm)
    try:
        # Stopped while its job waits: the job is cancelled, the launch ends at once.
        handle = launch_in_background(until_go, (str(tmp_path),), 2, cluster=LIMITED, ui="none")
        model = handle.model
        _await(lambda: model.job is not None and model.job.reason == "Resources", "queued job")
        job = model.job
        assert job.state == "PENDING" and _ours(slurm) == [job.job]
        html = status_html(model, model.clock())
        assert f"Slurm job {job.job} pending (Resources), expected start" in html
        assert 'data-state="pending"' in html
        assert handle.stop(30)
        with pytest.raises(LaunchStoppedError, match=f"Slurm job {job.job} waited in the queue"):
            handle.wait(0)
        assert _ours(slurm) == []

        # Held by its owner, then running once the other job is gone: its time left.
        handle = launch_in_background(until_go, (str(tmp_path),), 2, cluster=LIMITED, ui="none")
        model = handle.model
        _await(lambda: model.job is not None and model.job.state == "PENDING", "queued job")
        job = model.job.job
        slurm.run("scontrol", "hold", job)
        _await(lambda: model.job.reason.startswith("JobHeld"), "held job")
        assert f"Slurm job {job} pending (JobHeld" in status_text(model, model.clock())
        slurm.run("scontrol", "release", job)
        slurm.run("scancel", blocker)
        _await(lambda: model.job.state == "RUNNING", "running job", 2 * WAIT)
        left = model.job.left()
        assert left is not None and 0 < left <= 9 * 60
        html = status_html(model, model.clock())
        assert f"Slurm job {job} running, " in html and " left" in html
        assert 'data-near-limit="false"' in html  # 9 min: more than 5 min and 10 % left
        (tmp_path / "go").touch()
        assert handle.wait(120).values == ["n1", "n2"]
        assert "min" in status_text(handle.model, model.clock())  # the final panel keeps it
    finally:
        slurm.run("scancel", blocker, check=False)
