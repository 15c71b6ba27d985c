"""A session on Slurm: one job holds the nodes across calls, its ranks keep their namespaces and
process group; a failing call keeps the session, a killed rank breaks it, close() gives the job
back."""

from __future__ import annotations

import os

import pytest
from helpers.lanes import interrupted_call, killed_rank_breaks, warm_call_median

from notebook_launcher import Session, SlurmCluster

# A 4-minute limit: less than the 5 minutes at which a session warns, from its first call on.
TWO_NODES = SlurmCluster(nodes=2, time="00:04:00", kernel_address="127.0.0.1", timeout=120)


def _reaper_pipe() -> str:
    """The pipe the job's reaper waits on (its stdin), as /proc names it: "pipe:[N]"."""
    import psutil

    reapers = [
        p
        for p in psutil.Process().children(recursive=True)
        if any(part.endswith("slurm/reaper.py") for part in p.cmdline())
    ]
    assert len(reapers) == 1, reapers
    return os.readlink(f"/proc/{reapers[0].pid}/fd/0")


def _fds_of_a_forked_child() -> set[str]:
    """What a child forked from the kernel (a local rank, a DataLoader worker) holds open."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its descriptors' targets, and go
        try:
            targets = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    targets.append(os.readlink(f"/proc/self/fd/{fd}"))
                except OSError:
                    pass
            os.write(write, "\n".join(targets).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return set(b"".join(chunks).decode().splitlines())


def test_a_session_holds_its_job_across_calls_until_closed(slurm, capfd):
    session = Session(num_processes=2, cluster=TWO_NODES, ui="console")
    try:
        jobs = slurm.jobs()
        assert len(jobs) == 1 and "RUNNING" in jobs[0]
        job = jobs[0].split()[0]
        # A child forked from the kernel does not keep the job's reaper waiting.
        pipe = _reaper_pipe()
        assert pipe.startswith("pipe:") and pipe not in _fds_of_a_forked_child()

        panel = session.exec("1").panel  # the call's panel: the job's time left, near its limit
        text = panel.text()
        assert f"Slurm job {job} running, " in text and " left" in text
        assert 'data-near-limit="true"' in panel.html()
        assert f"Slurm job {job} reaches its time limit in " in capfd.readouterr().err
        places = session.exec(
            "import os, torch, torch.distributed as dist\n"
            "x = torch.ones(1) * (dist.get_rank() + 1)\n"
            "dist.all_reduce(x)\n"
            "os.environ['SLURMD_NODENAME'], os.getpid()"
        ).values
        assert [node for node, _ in places] == ["n1", "n2"]
        assert [float(v) for v in session.pull("x")] == [3.0, 3.0]

        with pytest.raises(ZeroDivisionError) as caught:
            session.exec("1 / dist.get_rank()")
        notes = "\n".join(getattr(caught.value, "__notes__", []))
        assert "rank 0 (node n1" in notes and "still usable" in notes
        assert session.state == "alive"
        session.exec("dist.all_reduce(x)")  # the namespaces and the process group were kept
        assert session.exec("float(x)").values == [6.0, 6.0]
        assert slurm.jobs() == jobs  # the same job, held

        interrupted_call(session)
        assert session.state == "alive"

        warm = warm_call_median(session, "1", 10)
        print(f"warm session call, 2 ranks on 2 nodes: median {warm * 1000:.1f} ms")

        killed_rank_breaks(session, places[1][1], "1")  # a rank's process dies between calls
    finally:
        session.close()
    assert session.state == "closed"
    assert slurm.wait_no_jobs() == []  # close() gave the job back
