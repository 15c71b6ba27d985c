"""Slurm: each rank a task of one ``srun`` job step, supervised from the kernel.

Each attempt runs in an allocation (:mod:`.allocation`: the one this kernel runs in, or a job
it submits and cancels), as one job step started with ``srun`` from the kernel. Every task runs
:mod:`notebook_launcher.worker.slurm_rank`, which connects back to this kernel's listener with the
attempt's secret (passed in the environment), receives its spec and the function, and runs as
any rank on a cluster does: the ranks' handles (:mod:`..remote.links`) turn each socket into
what a local worker's pipes carry, so the worker group, supervisor, watchdogs and views are the
same. The job's rendezvous store is hosted here, on the same address.

The parts: :mod:`.settings` (what a launch asks for), :mod:`.allocation` (the job it runs in),
:mod:`.step` (one attempt: its step, listener and store), :mod:`.srun` (the step's command line
and what srun says), :mod:`.handle` (a rank that is a task), :mod:`.endings` (how srun words a
task's end), :mod:`.node_check` (what each node has), :mod:`.commands` (Slurm's commands) and
:mod:`.reaper` (the job taken with a kernel that dies).

Slurm does what it is good at: queueing, placing tasks, starting them, and saying how each
ended; ``srun``'s report of each task (and Slurm's reasons: time limit, cancellation, node
failure, memory) tells the kernel how a rank ended.
"""

from __future__ import annotations

import os
from typing import Any

from ....protocol.cluster_job import ClusterJob
from ....protocol.spec import WorkerSpec
from ..base import WorkerHandle
from ..remote.launcher import RemoteLauncher
from .allocation import check_request
from .settings import SlurmCluster
from .step import StepAttempt

__all__ = ["SlurmCluster", "SlurmLauncher"]


class SlurmLauncher(RemoteLauncher):
    """Starts each rank as one task of a Slurm job step (see the module's docstring)."""

    start_method = "slurm"
    pickle_advice = (
        "On Slurm the function and every argument travel to the ranks by value (cloudpickle): "
        "pass something picklable (a path, a config, plain tensors) and create the object inside "
        "the function. Modules they import must be importable on every node (a shared "
        "filesystem, or SlurmCluster(setup=...) to load them)."
    )

    def prepare(self) -> None:
        """Refuse what Slurm would refuse before anything is queued."""
        settings = self.plan.cluster
        if not os.environ.get("SLURM_JOB_ID"):
            nodes, per_node = settings.layout(self.plan.num_processes)
            check_request(settings, nodes, per_node)

    def start_group(self, specs: list[WorkerSpec], payload: Any, now: float) -> list[WorkerHandle]:
        return StepAttempt(self.plan.cluster, self.report, self.stop_requested).start(
            specs, payload
        )

    def report(self, status: ClusterJob) -> None:
        """Keep the job's state and tell the launch's listeners (its views)."""
        self.job_status = status
        for listener in self.listeners:
            listener(status)
