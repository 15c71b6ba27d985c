"""Slurm's own commands, run from the kernel with a bound on each: what a launch asks Slurm
(``sbatch``, ``squeue``, ``scancel``, ``sinfo``, ``scontrol``), and the errors that name what
Slurm said."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import NamedTuple

from ...errors import ClusterError

COMMAND_LIMIT = 30.0  # seconds any one Slurm command may take


def require(name: str) -> str:
    """The path of Slurm command ``name``; a :class:`ClusterError` if it is not on PATH."""
    path = shutil.which(name)
    if path is None:
        raise ClusterError(
            f"cluster='slurm': {name} is not on PATH: run the notebook on a host of the Slurm "
            "cluster (a login node, JupyterHub with batchspawner, Open OnDemand), or load its "
            "module (module load slurm) before starting the kernel"
        )
    return path


def run(*args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run Slurm command ``args`` (bounded); its stdout. A :class:`ClusterError` with Slurm's
    own words if it fails (``check``)."""
    try:
        done = subprocess.run(
            [require(args[0]), *args[1:]],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ClusterError(
            f"{args[0]} did not answer within {COMMAND_LIMIT:g} s: is slurmctld reachable?"
        ) from None
    if check and done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split()) or f"exit code {done.returncode}"
        raise ClusterError(f"{' '.join(args[:1])} refused the request: {said}")
    return done.stdout


def hostnames(nodelist: str) -> list[str]:
    """The nodes of a Slurm node list ("n[1-2]"), in Slurm's order."""
    return run("scontrol", "show", "hostnames", nodelist).split()


class JobState(NamedTuple):
    """What squeue says of a job: its state, Slurm's reason, its nodes, its (expected) start
    and its end (the time limit) as Slurm prints them."""

    state: str
    reason: str
    nodes: str
    start: str
    end: str


def job_state(job: str) -> JobState | None:
    """What squeue says of ``job``, or None once squeue no longer shows it."""
    out = run("squeue", "-h", "-j", job, "-o", "%T|%r|%N|%S|%e", check=False).strip()
    if not out:
        return None
    return JobState(*(out.splitlines()[0].split("|") + [""] * 4)[:5])


def epoch(stamp: str) -> float | None:
    """Seconds since the epoch of a Slurm time stamp ("2026-12-02T05:10:00", local time);
    None for "N/A", "Unknown", "NONE" and the like."""
    try:
        return time.mktime(time.strptime(stamp.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def cancel(target: str, signal: str | None = None) -> None:
    """``scancel`` a job or job step (``"12"``, ``"12.0"``); never raises."""
    try:
        args = ["scancel", *([f"--signal={signal}"] if signal else []), target]
        run(*args, check=False)
    except ClusterError:
        pass
