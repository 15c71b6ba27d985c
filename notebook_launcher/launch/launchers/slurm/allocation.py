"""The nodes a launch's job step runs on: the allocation this kernel already runs in
(``SLURM_JOB_ID``), or a job submitted with ``sbatch`` that holds its nodes until it is cancelled.

While a submitted job waits in the queue, the cell says its id, state, Slurm's reason and the
expected start (``squeue --start``); an interrupt, the queue limit or a job that ends before it
runs cancels it. A helper process (:mod:`.reaper`) cancels it should the kernel die.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ....protocol.cluster_job import ClusterJob
from ....protocol.rank_start import TIME_WARNING_SIGNAL
from ...errors import ClusterError, LaunchStoppedError
from . import commands

QUEUE_POLL = 0.5  # seconds between looks at a pending job
QUIET_QUEUE = 1.0  # seconds a job may be pending before the cell says so
HOLDER = "exec sleep 2147483647"  # the job's own script: it holds the nodes, the steps do the work
JOB_NAME = "notebook_launcher"
_pipes: set[int] = set()  # this kernel's write ends of its reapers' pipes


class Allocation:
    """A Slurm job whose nodes the ranks run on: ``job`` (its id), ``nodes`` (its node names in
    Slurm's order), ``submitted`` (this kernel submitted it, so it cancels it)."""

    def __init__(self, job: str, nodes: list[str], submitted: bool, reaper: Any = None) -> None:
        self.job = job
        self.nodes = nodes
        self.submitted = submitted
        self.status: ClusterJob | None = None  # what squeue said of it last
        self._reaper = reaper  # (process, write end of its pipe)
        self._released = False

    @classmethod
    def acquire(
        cls,
        settings: Any,
        nodes: int,
        per_node: int,
        say: Any = print,
        report: Any = None,
        stop: Any = None,
    ) -> Allocation:
        """The allocation to run ``nodes`` x ``per_node`` ranks in: this kernel's own, or a new
        job once it runs (``say`` is told what the queue does meanwhile, ``report`` each
        :class:`ClusterJob` state of the job; setting ``stop`` cancels a queued job)."""
        report = report or (lambda status: None)
        job = os.environ.get("SLURM_JOB_ID")
        if job:
            commands.require("srun")
            names = commands.hostnames(os.environ.get("SLURM_JOB_NODELIST") or _nodes_of(job))
            if len(names) < nodes:
                raise ClusterError(
                    f"SlurmCluster(nodes={nodes}): this kernel's allocation (job {job}) has "
                    f"{len(names)} node{'s' if len(names) != 1 else ''} ({', '.join(names)})"
                )
            allocation = cls(job, names[:nodes], submitted=False, reaper=_reaper(()))
            state = allocation.state()
            if state is not None:
                report(allocation.seen(state))
            return allocation
        return _submit(settings, nodes, per_node, say, report, stop)

    def seen(self, state: commands.JobState) -> ClusterJob:
        """Keep and return what ``state`` (squeue's word) says of the job."""
        start = state.start if state.start not in ("", "N/A", "Unknown", "None") else ""
        self.status = ClusterJob(
            self.job,
            state.state,
            reason=state.reason if state.reason not in ("", "None") else "",
            expected_start=start,
            started_at=commands.epoch(state.start),
            ends_at=commands.epoch(state.end),
        )
        return self.status

    def watch_step(self, pid: int) -> None:
        """Have the reaper end ``srun`` ``pid`` should the kernel die."""
        if self._reaper is not None:
            _tell(self._reaper[1], f"{pid}\n".encode())

    def state(self) -> tuple[str, str, str, str] | None:
        return commands.job_state(self.job)

    def release(self, steps_ended: bool = True) -> None:
        """Cancel the job if this kernel submitted it, and let the reaper go. Idempotent."""
        if self._released:
            return
        self._released = True
        if self.submitted:
            commands.cancel(self.job)
        if self._reaper is not None:
            process, pipe = self._reaper
            if steps_ended:
                _tell(pipe, b"x")
            _pipes.discard(pipe)
            os.close(pipe)
            try:
                process.wait(commands.COMMAND_LIMIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _nodes_of(job: str) -> str:
    state = commands.job_state(job)
    if state is None:
        raise ClusterError(f"SLURM_JOB_ID={job}: squeue does not show that job")
    return state[2]


def batch_script(settings: Any, nodes: int, per_node: int) -> str:
    """The job's script: its ``#SBATCH`` options and a holder (the ranks are job steps)."""
    s = settings
    options = [
        f"--job-name={JOB_NAME}",
        f"--nodes={nodes}",
        f"--ntasks-per-node={per_node}",
        f"--cpus-per-task={s.cpus_per_task}",
        "--output=/dev/null",
        f"--signal={TIME_WARNING_SIGNAL}@{s.warning_seconds}",
    ]
    for name, value in (
        ("partition", s.partition),
        ("account", s.account),
        ("qos", s.qos),
        ("constraint", s.constraint),
        ("mem", s.mem),
        ("time", s.time),
    ):
        if value is not None:
            options.append(f"--{name}={value}")
    if s.gpus_per_node:
        options.append(f"--gpus-per-node={s.gpus_per_node}")
    options.extend(s.sbatch_options)
    lines = ["#!/bin/sh", *(f"#SBATCH {option}" for option in options), HOLDER]
    return "\n".join(lines) + "\n"


def check_request(settings: Any, nodes: int, per_node: int) -> None:
    """Refuse, before anything is queued, what Slurm would refuse: an unknown partition or
    option, resources the partition cannot hold (``sbatch --test-only``)."""
    commands.require("sbatch")
    commands.require("srun")
    if settings.partition is not None:
        known = commands.run("sinfo", "-h", "-o", "%R").split()
        if settings.partition not in known:
            raise ClusterError(
                f"SlurmCluster(partition={settings.partition!r}): no such partition; the "
                f"cluster has {', '.join(known) or 'none'}"
            )
    try:
        commands.run("sbatch", "--test-only", stdin=batch_script(settings, nodes, per_node))
    except ClusterError as error:
        raise ClusterError(f"Slurm refused the job SlurmCluster(...) describes: {error}") from None


def _submit(
    settings: Any, nodes: int, per_node: int, say: Any, report: Any, stop: Any
) -> Allocation:
    """Submit the job (the launcher's ``prepare`` checked the request) and wait until it runs."""
    script = batch_script(settings, nodes, per_node)
    with interruptible():
        job = commands.run("sbatch", "--parsable", stdin=script).strip().split(";")[0]
        allocation = Allocation(job, [], submitted=True, reaper=_reaper((job,)))
        try:
            allocation.nodes = _await_running(allocation, settings, say, report, stop)
        except BaseException:
            allocation.release()
            raise
    return allocation


def _await_running(
    allocation: Allocation, settings: Any, say: Any, report: Any, stop: Any
) -> list[str]:
    """The job's nodes once it runs; says (and reports) each change while it waits (bounded by
    the queue limit)."""
    job = allocation.job
    started = time.monotonic()
    shown = None
    while True:
        state = allocation.state()
        if state is None or state[0] not in ("PENDING", "CONFIGURING", "RUNNING"):
            raise ClusterError(
                f"Slurm job {job} ended before it ran ({state[0] if state else 'gone'}"
                f"{f', {state[1]}' if state and state[1] not in ('', 'None') else ''})"
            )
        report(allocation.seen(state))  # each look: the views redraw it as they see fit
        if state[0] == "RUNNING":
            if shown is not None:
                say(f"notebook_launcher: Slurm job {job} is running on {state[2]}")
            return commands.hostnames(state[2])
        text = _pending_text(job, state)
        if text != shown and time.monotonic() - started >= QUIET_QUEUE:
            say(text)
            shown = text
        waited = time.monotonic() - started
        if stop is not None and stop.is_set():
            raise LaunchStoppedError(
                f"the launch was stopped on request while Slurm job {job} waited in the queue; "
                "the job was cancelled"
            )
        if settings.queue_timeout is not None and waited >= settings.queue_timeout:
            raise ClusterError(
                f"Slurm job {job} waited {waited:.0f} s in the queue (reason: {state[1]}) and was "
                f"cancelled: SlurmCluster(queue_timeout={settings.queue_timeout:g}) waits that "
                "long at most"
            )
        if stop is not None:
            stop.wait(QUEUE_POLL)
        else:
            time.sleep(QUEUE_POLL)


def _pending_text(job: str, state: tuple[str, str, str, str]) -> str:
    start = state[3] if state[3] not in ("", "N/A", "Unknown") else "not known yet"
    reason = f" (reason: {state[1]})" if state[1] not in ("", "None") else ""
    return (
        f"notebook_launcher: Slurm job {job} is {state[0].lower()}{reason}; "
        f"expected start: {start}; interrupt the kernel to cancel it"
    )


@contextmanager
def interruptible():
    """Let an interrupt through while the job waits in the queue or for its ranks (the launch
    defers interrupts while it starts its ranks): the job is cancelled on the way out."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main and previous is not None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGINT, previous)


def _reaper(jobs: tuple[str, ...]) -> tuple[subprocess.Popen, int]:
    read, write = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).with_name("reaper.py")), *jobs],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # an interrupt of the kernel's group is not its end
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    _pipes.add(write)
    return process, write


def _forget_pipes() -> None:
    """In a child forked from the kernel (a local rank): close the kernel's ends of the
    reapers' pipes, so that a reaper's pipe ends with the kernel, not with the last of its
    forked children (a pipe's fd is closed on exec already, but a fork keeps it)."""
    for fd in list(_pipes):
        try:
            os.close(fd)
        except OSError:
            pass
    _pipes.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pipes)


def _tell(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except OSError:
        pass
