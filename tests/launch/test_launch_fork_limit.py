"""A fork the OS refuses part-way through start-up: a clear error, and no worker left running.

The launch runs in a child interpreter whose process limit lets only some of the four workers
start: a pids cgroup (cgroup v1, as root) where the machine has one, and in every case
``RLIMIT_NPROC`` (``ulimit -u``; root, whom it does not bind, first becomes ``nobody``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

PIDS_ROOT = "/sys/fs/cgroup/pids"

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import psutil
    from notebook_launcher import LaunchError, WorkersNotStartedError, notebook_launcher

    def idle():
        time.sleep(5)

    # One launch first imports what launching needs (``nobody`` may not read this installation).
    notebook_launcher(time.sleep, args=(0,), num_processes=2, ui="none", output="none")

    def in_pids_cgroup(group):
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        used = int(open(os.path.join(group, "pids.current")).read())
        with open(os.path.join(group, "pids.max"), "w") as f:
            f.write(str(used + 1))

    def under_rlimit_nproc():
        import resource
        if os.geteuid() == 0:  # the limit does not bind root
            os.setgid(65534)
            os.setuid(65534)
        uid = os.getuid()
        # Linux counts every thread of the user's processes against the limit.
        used = sum(p.info["num_threads"] for p in psutil.process_iter(["uids", "num_threads"])
                   if p.info["uids"] is not None and p.info["uids"].real == uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (used + 1, used + 1))

    if sys.argv[1] == "rlimit-nproc":
        under_rlimit_nproc()
    else:
        in_pids_cgroup(sys.argv[1])
    try:
        notebook_launcher(idle, num_processes=4, ui="none", output="none", timeout=60)
    except WorkersNotStartedError as error:
        assert isinstance(error, LaunchError)
        left = [p for p in psutil.Process().children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE and "janitor" not in " ".join(p.cmdline())]
        print("STARTED", error.started, error.requested, "LEFT", len(left))
        print(error)
    else:
        print("LAUNCHED")
    """
)


def _pids_cgroup_usable() -> bool:
    return os.geteuid() == 0 and os.access(PIDS_ROOT, os.W_OK)


def _launch_under_limit(limit: str) -> str:
    """Run the script under ``limit`` (a cgroup path or "rlimit-nproc"); its output."""
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, limit], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout + run.stderr[-3000:]


def _check_refusal(output: str) -> None:
    first, _, message = output.partition("\n")
    words = first.split()
    assert words[0] == "STARTED", output
    started, requested, left = int(words[1]), int(words[2]), int(words[4])
    print(first)  # how many started before the refusal
    assert requested == 4 and 1 <= started < 4
    assert left == 0
    assert f"the OS refused to start worker process {started + 1} of 4" in message
    assert f"{started} of 4 workers had started and were stopped" in message
    assert "pids.max" in message and "ulimit -u" in message


def test_a_fork_refused_part_way_stops_the_started_workers():
    if not _pids_cgroup_usable():  # no cgroup of our own here: the user process limit
        _check_refusal(_launch_under_limit("rlimit-nproc"))
        return
    group = os.path.join(PIDS_ROOT, f"notebook_launcher_test_{uuid.uuid4().hex[:8]}")
    os.mkdir(group)
    try:
        output = _launch_under_limit(group)
    finally:
        os.rmdir(group)  # empty again: the child and its workers are gone
    _check_refusal(output)


def test_a_fork_refused_by_the_user_process_limit_stops_the_started_workers():
    _check_refusal(_launch_under_limit("rlimit-nproc"))
