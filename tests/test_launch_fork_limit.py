"""A fork the OS refuses part-way through start-up: a clear error, and no worker left running.

The launch runs in a child interpreter placed in a pids cgroup (cgroup v1, as root) whose limit
lets only some of the four workers start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

PIDS_ROOT = "/sys/fs/cgroup/pids"

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import psutil
    from notebook_launcher import LaunchError, WorkersNotStartedError, notebook_launcher

    def idle():
        time.sleep(5)

    group = sys.argv[1]
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    used = int(open(os.path.join(group, "pids.current")).read())
    with open(os.path.join(group, "pids.max"), "w") as f:
        f.write(str(used + 1))
    try:
        notebook_launcher(idle, num_processes=4, ui="none", output="none", timeout=60)
    except WorkersNotStartedError as error:
        assert isinstance(error, LaunchError)
        left = [p for p in psutil.Process().children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]
        print("STARTED", error.started, error.requested, "LEFT", len(left))
        print(error)
    else:
        print("LAUNCHED")
    """
)


def _pids_cgroup_usable() -> bool:
    return os.geteuid() == 0 and os.access(PIDS_ROOT, os.W_OK)


@pytest.mark.skipif(not _pids_cgroup_usable(), reason="needs root and a cgroup v1 pids controller")
def test_a_fork_refused_part_way_stops_the_started_workers():
    group = os.path.join(PIDS_ROOT, f"notebook_launcher_test_{uuid.uuid4().hex[:8]}")
    os.mkdir(group)
    try:
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT, group],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.rmdir(group)  # empty again: the child and its workers are gone

    assert run.returncode == 0, run.stderr[-3000:]
    first, _, message = run.stdout.partition("\n")
    words = first.split()
    assert words[0] == "STARTED", run.stdout + run.stderr[-3000:]
    started, requested, left = int(words[1]), int(words[2]), int(words[4])
    print(first)  # how many started before the refusal: 2 here (the third fork failed)
    assert requested == 4 and 1 <= started < 4
    assert left == 0
    assert f"the OS refused to start worker process {started + 1} of 4" in message
    assert f"{started} of 4 workers had started and were stopped" in message
    assert "pids.max" in message
