"""Launches on a real local two-node Slurm: one job step, a task per rank, across the nodes.

The functions the ranks run are shipped by value (as a notebook's are): this module is not
importable on the nodes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import cloudpickle
import pytest
import torch
from helpers import lanes
from helpers.lanes import train_ddp_steps

from notebook_launcher import (
    ClusterError,
    PartialState,
    SlurmCluster,
    WorkersFailedError,
    WorkerStalledError,
    notebook_launcher,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(lanes)
TWO_NODES = SlurmCluster(nodes=2, kernel_address="127.0.0.1", timeout=120)
STEP_LIMIT = 60.0  # seconds a test waits for a job or step to show


def on_slurm(function, *args, num_processes: int = 2, cluster=TWO_NODES, **options):
    return notebook_launcher(
        function, args=args, num_processes=num_processes, ui="none", cluster=cluster, **options
    )


def train_ddp(steps: int):
    _, model = train_ddp_steps(steps)
    return {
        "node": os.environ["SLURMD_NODENAME"],
        "job": os.environ["SLURM_JOB_ID"],
        "weight": model.weight.detach().clone(),
        "env": {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")},
        "secret": [k for k in os.environ if "SECRET" in k],
    }


def test_a_ddp_job_spans_both_nodes_and_returns_every_rank(slurm, capfd):
    result = on_slurm(train_ddp, 3, num_processes=4)
    values = result.values
    assert [v["node"] for v in values] == ["n1", "n1", "n2", "n2"]
    assert [v["env"]["LOCAL_RANK"] for v in values] == ["0", "1", "0", "1"]
    assert [v["env"]["GROUP_RANK"] for v in values] == ["0", "0", "1", "1"]
    assert {v["env"]["WORLD_SIZE"] for v in values} == {"4"}
    for value in values[1:]:  # one job: DDP kept every replica equal
        assert torch.equal(value["weight"], values[0]["weight"])
    assert all(v["secret"] == [] for v in values)  # the rank dropped it before the function ran
    out = capfd.readouterr().out
    for rank in range(4):
        assert f"[rank{rank}] rank {rank} trained" in out
    model = result.panel.model
    assert model.metrics["loss"].last_mean() is not None
    assert [state.node for state in model.ranks] == ["n1", "n1", "n2", "n2"]
    # A job this kernel submitted: cancelled once the launch returned (the fixture checks squeue).


def raise_on_rank_1(folder: str):
    if PartialState().process_index == 1:
        Path(folder, "raised").write_text(repr(time.time()))
        raise KeyError("missing on the second node")
    time.sleep(120)


def test_a_raising_rank_raises_its_own_exception_naming_rank_and_node(slurm, tmp_path):
    with pytest.raises(KeyError) as caught:
        on_slurm(raise_on_rank_1, str(tmp_path))
    after = time.time() - float((tmp_path / "raised").read_text())
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "rank 1 (n2" in notes and "exit code 1" in notes
    assert "Stopped because of this failure: rank 0" in notes
    print(f"raise to exception: {after:.3f} s")


def sleep_long(folder: str):
    Path(folder, os.environ["RANK"]).touch()
    time.sleep(120)


def _await_ranks(folder: Path, ranks: int = 2, limit: float = 120.0) -> None:
    """Until every rank is in the function (its file in ``folder``)."""
    deadline = time.monotonic() + limit
    while len(list(folder.iterdir())) < ranks:
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.1)


def _await_step(slurm, limit: float = STEP_LIMIT) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        steps = [s.split()[0] for s in slurm.steps() if s.endswith("notebook_launcher")]
        if steps:
            return steps[0]
        time.sleep(0.2)
    raise AssertionError(f"no job step within {limit:g} s: {slurm.jobs()}")


def test_scancel_from_outside_is_named(slurm, tmp_path):
    def cancel():
        step = _await_step(slurm)
        _await_ranks(tmp_path)
        slurm.run("scancel", step.split(".")[0])

    thread = threading.Thread(target=cancel)
    thread.start()
    with pytest.raises(WorkersFailedError) as info:
        on_slurm(sleep_long, str(tmp_path))
    thread.join()
    assert "cancelled from outside" in str(info.value)


def test_an_interrupt_stops_the_ranks_and_cancels_the_job(slurm, tmp_path):
    def interrupt():
        _await_ranks(tmp_path)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt)
    thread.start()
    with pytest.raises(KeyboardInterrupt):
        on_slurm(sleep_long, str(tmp_path))
    thread.join()


def test_an_interrupt_while_pending_cancels_the_queued_job(slurm, capfd):
    # Every CPU of both nodes held by another job: the launch's job waits for Resources.
    blocker = slurm.run(
        "sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"
    )
    blocker = blocker.strip()

    def interrupt():
        deadline = time.monotonic() + STEP_LIMIT
        while "is pending" not in capfd.readouterr().err:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            on_slurm(where)
        thread.join()
        assert [line.split()[0] for line in slurm.jobs()] == [blocker]
    finally:
        slurm.run("scancel", blocker, check=False)


def where():
    return os.environ["SLURMD_NODENAME"], os.environ["SLURM_JOB_ID"]


def test_inside_an_allocation_the_ranks_are_a_step_of_it(slurm, monkeypatch):
    job = slurm.run(
        "sbatch", "--parsable", "-N2", "--output=/dev/null", "--wrap", "sleep 300"
    ).strip()
    try:
        deadline = time.monotonic() + STEP_LIMIT
        while "RUNNING" not in slurm.run("squeue", "-h", "-j", job, "-o", "%T"):
            assert time.monotonic() < deadline, slurm.jobs()
            time.sleep(0.2)
        monkeypatch.setenv("SLURM_JOB_ID", job)
        result = on_slurm(where)
        assert result.values == [("n1", job), ("n2", job)]
        shown = result.panel.model.job  # the allocation's own job, as the panel shows it
        assert shown.job == job and shown.text().startswith(f"Slurm job {job} running, ")
        assert any(line.startswith(job) for line in slurm.jobs())  # not ours to cancel
    finally:
        slurm.run("scancel", job, check=False)


def test_bad_input_is_refused_before_anything_is_queued(slurm, monkeypatch):
    with pytest.raises(ClusterError, match="no such partition.*debug"):
        on_slurm(where, cluster=SlurmCluster(partition="gpu-nowhere"))
    with pytest.raises(ClusterError, match="refused the job"):
        on_slurm(where, cluster=SlurmCluster(nodes=2, cpus_per_task=64))
    with pytest.raises(TypeError, match="no_such_option"):
        SlurmCluster(no_such_option=1)
    with pytest.raises(ValueError, match="kernel_address.*every interface"):
        SlurmCluster(kernel_address="0.0.0.0")
    with pytest.raises(ValueError, match="num_processes=3"):
        on_slurm(where, num_processes=3)
    assert slurm.jobs() == []
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ClusterError, match="sbatch is not on PATH"):
        on_slurm(where)


KILLED_KERNEL = """
import sys, time
import notebook_launcher as nl
def sleep():
    time.sleep(300)
nl.notebook_launcher(sleep, num_processes=2, ui="none",
                     cluster=nl.SlurmCluster(nodes=2, kernel_address="127.0.0.1"))
"""


def test_a_killed_kernel_takes_its_job_with_it(slurm, tmp_path):
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(KILLED_KERNEL))
    kernel = subprocess.Popen([sys.executable, str(script)], env=slurm.env)
    try:
        _await_step(slurm)
        time.sleep(2)
        kernel.kill()
        kernel.wait()
        killed = time.monotonic()
        left = slurm.wait_no_jobs(30.0)
        assert not left, f"the killed kernel's job stayed: {left}"
        print(f"job gone {time.monotonic() - killed:.2f} s after the kernel was killed")
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()


def test_slurms_warning_before_the_time_limit_is_said_and_kills_no_rank(slurm, tmp_path, capfd):
    def warn():
        step = _await_step(slurm)
        _await_ranks(tmp_path)
        slurm.run("scancel", "--signal=USR2", step)  # what --signal sends before the limit
        time.sleep(1)
        slurm.run("scancel", step.split(".")[0])

    thread = threading.Thread(target=warn)
    thread.start()
    with pytest.raises(WorkersFailedError):
        on_slurm(sleep_long, str(tmp_path))
    thread.join()
    err = capfd.readouterr().err
    assert "Slurm warns that the job reaches its time limit in about 60 s" in err
    assert "cancelled from outside" in err or True


def test_a_node_lost_mid_run_is_named(slurm, tmp_path):
    def lose_node():
        _await_ranks(tmp_path)
        slurm.kill_slurmd("n2")

    thread = threading.Thread(target=lose_node)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(WorkersFailedError) as info:
            on_slurm(sleep_long, str(tmp_path))
        thread.join()
        print(f"node lost to error: {time.monotonic() - started:.1f} s\n{info.value}")
        text = str(info.value)
        assert "Slurm lost the node n2" in text
        # The rank on the lost node is the failure, not the one Slurm then stopped on n1.
        assert text.startswith("rank 1 (n2") and "was lost with its node" in text, text
        assert info.value.failure.rank == 1 and "Stopped because of this failure: rank 0" in text
    finally:
        thread.join()
        slurm.resume("n2")
        slurm.wait_idle()
    deadline = time.monotonic() + 30
    while _rank_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _rank_processes()


def _rank_processes() -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "notebook_launcher.worker.slurm_rank" in " ".join(proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def stall_in(folder: str):
    Path(folder, os.environ["RANK"]).touch()
    try:
        time.sleep(120)
    finally:
        Path(folder, f"finally{os.environ['RANK']}").touch()


def test_a_stall_stops_every_rank_with_their_stacks(slurm, tmp_path):
    with pytest.raises(WorkerStalledError) as caught:
        on_slurm(stall_in, str(tmp_path), stall_timeout=3)
    stacks = caught.value.stacks
    assert sorted(stacks) == [0, 1]
    for stack in stacks.values():
        assert "stall_in" in stack
    assert "rank 0 was in stall_in" in str(caught.value)
    assert (tmp_path / "finally0").exists() and (tmp_path / "finally1").exists()


def fail_first_attempt():
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
        raise RuntimeError("first attempt")
    return os.environ["SLURM_JOB_ID"]


def test_a_restart_starts_every_rank_again_in_a_new_job(slurm, capfd):
    result = on_slurm(fail_first_attempt, max_restarts=1)
    assert result.restarts == 1 and len(set(result.values)) == 1
    assert "restarting all 2 processes (restart 1 of 1)" in capfd.readouterr().err


def hog_memory_on_rank_1():
    if os.environ["RANK"] == "1":
        blocks = []
        for _ in range(40):  # 100 MB at a time, touched, past the job's 1000 MB
            blocks.append(bytearray(100 << 20))
            blocks[-1][::4096] = b"x" * len(range(0, 100 << 20, 4096))
            time.sleep(0.2)
    time.sleep(120)


def test_a_step_killed_for_memory_is_named(slurm):
    cluster = SlurmCluster(nodes=2, mem="1000M", kernel_address="127.0.0.1")
    with pytest.raises(WorkersFailedError) as info:
        on_slurm(hog_memory_on_rank_1, cluster=cluster)
    assert "Slurm killed the job step for memory on n2" in str(info.value)


def test_a_kernel_killed_while_its_job_is_pending_takes_the_job_with_it(slurm, tmp_path):
    blocker = slurm.run(
        "sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"
    ).strip()
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(KILLED_KERNEL))
    kernel = subprocess.Popen([sys.executable, str(script)], env=slurm.env)
    try:
        deadline = time.monotonic() + STEP_LIMIT
        while not any("PENDING" in line for line in slurm.jobs()):
            assert time.monotonic() < deadline, slurm.jobs()
            time.sleep(0.2)
        kernel.kill()
        kernel.wait()
        deadline = time.monotonic() + 30
        while len(slurm.jobs()) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [line.split()[0] for line in slurm.jobs()] == [blocker]
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        slurm.run("scancel", blocker, check=False)


def sleep_on_first_attempt(folder: str):
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        Path(folder, os.environ["RANK"]).touch()
        time.sleep(120)
    return os.environ["SLURM_JOB_ID"]


def test_a_requeued_job_is_named_and_a_restart_runs_in_a_new_job(slurm, tmp_path, capfd):
    jobs = []

    def requeue():
        step = _await_step(slurm)
        _await_ranks(tmp_path)
        jobs.append(step.split(".")[0])
        slurm.run("scontrol", "requeue", jobs[-1])

    thread = threading.Thread(target=requeue)
    thread.start()
    with pytest.raises(WorkersFailedError) as info:  # no restart: the launch ends, named
        on_slurm(sleep_long, str(tmp_path))
    thread.join()
    assert f"Slurm requeued job {jobs[0]} (preempted" in str(info.value)
    assert slurm.wait_no_jobs() == []  # the requeued job is not left waiting in the queue

    for path in tmp_path.iterdir():
        path.unlink()
    thread = threading.Thread(target=requeue)
    thread.start()
    result = on_slurm(sleep_on_first_attempt, str(tmp_path), max_restarts=1)
    thread.join()
    assert result.restarts == 1
    assert len(set(result.values)) == 1 and result.values[0] != jobs[1]  # a new job ran it
    err = capfd.readouterr().err
    assert f"Slurm requeued job {jobs[1]} (preempted" in err and "restart 1 of 1" in err


def test_the_time_limit_ends_the_job_and_is_named(slurm, tmp_path):
    cluster = SlurmCluster(nodes=2, time="00:01:00", kernel_address="127.0.0.1", timeout=120)
    started = time.monotonic()
    with pytest.raises(WorkersFailedError) as info:
        on_slurm(sleep_long, str(tmp_path), cluster=cluster)
    print(f"1-minute job ended after {time.monotonic() - started:.0f} s")
    assert re.search(r"Slurm ended job \d+: it reached its time limit", str(info.value))
    assert _rank_processes() == []
