"""SlurmCluster's settings and what srun says of a step, checked without a cluster: every bad
value is refused naming the setting, and srun's own lines (as Slurm 22.05 prints them) are read
into each task's end and Slurm's reason."""

from __future__ import annotations

import pytest

from notebook_launcher import SlurmCluster, plan_launch
from notebook_launcher.launch.launchers.slurm import endings
from notebook_launcher.launch.launchers.slurm.allocation import batch_script
from notebook_launcher.launch.launchers.slurm.settings import time_limit_seconds
from notebook_launcher.protocol.cluster_job import ClusterJob


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"nodes": 0}, "nodes=0"),
        ({"tasks_per_node": "2"}, "tasks_per_node='2'"),
        ({"cpus_per_task": 0}, "cpus_per_task=0"),
        ({"mem": "lots"}, "mem='lots'"),
        ({"time": "soon"}, "time='soon'"),
        ({"partition": "two words"}, "partition='two words'"),
        ({"sbatch_options": ["exclusive"]}, "sbatch_options"),
        ({"sbatch_options": ["--x\n--y"]}, "sbatch_options"),
        ({"kernel_address": "0.0.0.0"}, "every interface"),
        ({"kernel_address": "::"}, "every interface"),
        ({"timeout": 0}, "timeout=0"),
        ({"queue_timeout": -1}, "queue_timeout=-1"),
        ({"setup": 3}, "setup=3"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(options, match):
    with pytest.raises((TypeError, ValueError), match=match):
        SlurmCluster(**options)


def test_the_ranks_are_nodes_times_tasks_per_node():
    assert plan_launch(num_processes=4, cluster=SlurmCluster(nodes=2)).num_processes == 4
    assert plan_launch(cluster=SlurmCluster(nodes=3, tasks_per_node=2)).num_processes == 6
    assert plan_launch(num_processes=3, cluster="slurm").start_method == "slurm"
    with pytest.raises(ValueError, match="num_processes=3.*nodes x tasks_per_node"):
        plan_launch(num_processes=3, cluster=SlurmCluster(nodes=2))
    with pytest.raises(ValueError, match="tasks_per_node=2.*gpus_per_node=1"):
        plan_launch(num_processes=4, cluster=SlurmCluster(nodes=2, gpus_per_node=1))
    with pytest.raises(ValueError, match="num_nodes=2.*cluster='slurm'"):
        plan_launch(num_processes=2, cluster="slurm", num_nodes=2)
    with pytest.raises(ValueError, match="'slurm' or a SlurmCluster"):
        plan_launch(num_processes=2, cluster="pbs")


def test_the_job_script_carries_every_option():
    cluster = SlurmCluster(
        partition="gpu",
        account="proj",
        qos="high",
        constraint="a100",
        mem="16G",
        time="1:00:00",
        gpus_per_node=4,
        cpus_per_task=8,
        sbatch_options=["#SBATCH --exclusive", "--mail-type=END"],
    )
    script = batch_script(cluster, 2, 4).splitlines()
    for option in (
        "--nodes=2",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--constraint=a100",
        "--mem=16G",
        "--time=1:00:00",
        "--gpus-per-node=4",
        "--exclusive",
        "--mail-type=END",
        "--signal=USR2@60",
    ):
        assert f"#SBATCH {option}" in script


def test_srun_lines_tell_each_tasks_end_and_slurms_reason():
    assert endings.task_ends("srun: error: n2: task 1: Killed") == ("n2", [1], -9)
    assert endings.task_ends("srun: error: n1: tasks 0-2,5: Exited with exit code 3") == (
        "n1",
        [0, 1, 2, 5],
        3,
    )
    assert endings.task_ends("srun: error: n1: task 0: Terminated") == ("n1", [0], -15)
    assert endings.task_ends("0: hello") is None
    cancelled = "slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-12-02T01:59:22 ***"
    assert "cancelled from outside" in endings.slurm_ending(cancelled)
    limit = "slurmstepd-n1: error: *** JOB 7 ON n1 CANCELLED AT 2026-12-02T01:59:22 DUE TO TIME LIMIT ***"
    assert "time limit" in endings.slurm_ending(limit)
    assert "n2" in endings.slurm_ending("srun: error: Node failure on n2")
    assert endings.lost_node("srun: error: Node failure on n2") == "n2"
    assert endings.lost_node(limit) is None
    node = "slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-12-02T01:59:22 DUE TO NODE FAILURE ***"
    assert "n1" not in endings.slurm_ending(node)  # said on the node that survived
    requeue = "0: slurmstepd-n1: error: *** STEP 1.0 ON n1 CANCELLED AT 2026-12-02T04:54:23 DUE TO JOB REQUEUE ***"
    assert endings.slurm_ending(requeue).startswith("Slurm requeued job 1 (preempted")
    memory = "slurmstepd-n1: error: Detected 1 oom_kill event in StepId=4.0."
    assert "memory on n1" in endings.slurm_ending(memory)
    limit = (
        "1: slurmstepd-n2: error: StepId=3.0 exceeded memory limit (1178882048 > 1048576000), "
        "being killed"
    )
    said = endings.slurm_ending(limit)
    assert said.startswith("Slurm killed the job step for memory on n2: StepId=3.0 exceeded")
    assert endings.more_telling(endings.slurm_ending(cancelled), said)
    assert not endings.more_telling(said, endings.slurm_ending(cancelled))
    assert endings.slurm_ending("srun: Job step aborted: Waiting up to 4 seconds") is None


def test_the_warning_comes_at_most_half_the_time_limit_before_its_end():
    assert time_limit_seconds("30") == 1800  # minutes
    assert time_limit_seconds("1:30") == 90  # minutes:seconds
    assert time_limit_seconds("2:00:00") == 7200
    assert time_limit_seconds("1-12") == 129600  # days-hours
    assert time_limit_seconds("1-00:00:30") == 86430
    assert SlurmCluster(time="00:01:00").warning_seconds == 30
    assert SlurmCluster(time="2:00:00").warning_seconds == 60
    assert SlurmCluster().warning_seconds == 60
    assert "--signal=USR2@30" in batch_script(SlurmCluster(time="00:01:00"), 1, 1)


def test_a_jobs_line_says_its_queue_state_then_its_time_left():
    pending = ClusterJob("42", "PENDING", reason="Resources", expected_start="2026-12-02T05:10:00")
    assert pending.text() == (
        "Slurm job 42 pending (Resources), expected start 2026-12-02T05:10:00"
    )
    assert pending.left() is None and not pending.near_limit() and pending.warning() is None
    assert "expected start not known yet" in ClusterJob("42", "PENDING").text()
    now = 1_000_000.0
    four_hours = ClusterJob("42", "RUNNING", started_at=now - 3600, ends_at=now + 3 * 3600)
    assert four_hours.text(now) == "Slurm job 42 running, 3 h 0 min left"
    assert not four_hours.near_limit(now)
    assert four_hours.near_limit(now + 3 * 3600 - 23 * 60)  # < 10 % of 4 h left
    short = ClusterJob("42", "RUNNING", started_at=now, ends_at=now + 20 * 60)
    assert not short.near_limit(now + 14 * 60) and short.near_limit(now + 16 * 60)  # < 5 min
    assert short.warning(now + 16 * 60) == (
        "notebook_launcher: Slurm job 42 reaches its time limit in 4 min 0 s: the ranks are "
        "ended then; save what you need"
    )
    assert ClusterJob("42", "RUNNING", started_at=now).text(now) == (
        "Slurm job 42 running, no time limit"
    )
