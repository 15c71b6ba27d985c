"""The attempt's job step, as ``srun`` runs it: its command line and environment (every task
runs :mod:`notebook_launcher.worker.slurm_rank`, which connects back to the kernel), and what
srun says while it runs, read from its stdout and stderr: the last lines each task printed, each
task's end, and Slurm's own reasons to end the step (:mod:`.endings`)."""

from __future__ import annotations

import collections
import logging
import os
import shlex
import sys
from typing import Any

from ....protocol import rank_start
from ....protocol.rank_start import TIME_WARNING_SIGNAL
from . import endings

logger = logging.getLogger(__name__)
RANK_ENTRY = "notebook_launcher.worker.slurm_rank"
TAIL = 20  # lines of a task's output kept from before it connected


def step_environment(
    address: tuple[str, int], secret: bytes, restart: int, warning_seconds: Any
) -> dict[str, str]:
    """The environment srun gives every task: this kernel's, and where and how its rank
    connects back (``address``, the attempt's ``secret``, which attempt ``restart`` is)."""
    host, port = address
    return {
        **os.environ,
        rank_start.KERNEL_ENV: f"{host}:{port}",
        rank_start.SECRET_ENV: secret.hex(),
        rank_start.ATTEMPT_ENV: str(restart),
        rank_start.WARNING_ENV: str(warning_seconds),
    }


def step_command(
    settings: Any, job: str, node_names: list[str], nodes: int, per_node: int
) -> list[str]:
    """The ``srun`` command line of a step of ``per_node`` tasks on each of ``nodes`` nodes
    (``node_names``) of job ``job``, each task a rank as ``settings`` (a SlurmCluster) set."""
    python = settings.python or sys.executable
    # Slurm's warning before the time limit is ignored until the rank is ready for it (an
    # ignored signal stays ignored across exec): it would kill a rank that is importing.
    command = [
        "/bin/sh",
        "-c",
        f"trap '' {TIME_WARNING_SIGNAL}\n{settings.setup}\n"
        f"exec {shlex.join([python, '-u', '-m', RANK_ENTRY])}",
    ]
    return [
        "srun",
        f"--jobid={job}",
        "--overlap",
        f"--nodes={nodes}",
        f"--ntasks={nodes * per_node}",
        f"--ntasks-per-node={per_node}",
        f"--nodelist={','.join(node_names)}",
        f"--cpus-per-task={settings.cpus_per_task}",
        "--distribution=block",
        "--kill-on-bad-exit=0",
        "--label",
        "--input=none",
        "--job-name=notebook_launcher",
        *(["--gpus-per-task=1"] if settings.gpus_per_node else []),
        *command,
    ]


class SrunOutput:
    """What srun says of its step, each stream read by a thread of the step's
    (:meth:`read_stdout`, :meth:`read_stderr`): the last lines of each task (``-1``: srun's own
    lines), and each task's exit code as srun reported it (``codes``).

    ``step`` hears, in the order srun says them, each task's end (``task_ended(task, code)``),
    Slurm's reason the step ends (``slurm_says(why)``) and a node Slurm lost
    (``node_lost(node, why)``).
    """

    def __init__(self, step: Any) -> None:
        self.step = step
        self.tails: dict[int, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=TAIL)
        )
        self.codes: dict[int, int] = {}  # task -> exit code, as srun reported it

    def said(self, rank: int) -> str:
        """The last lines rank ``rank``'s task and srun printed, for an error ('' if none)."""
        lines = list(self.tails.get(rank, ())) + list(self.tails.get(-1, ()))
        return "; it said:\n" + "\n".join(lines) if lines else ""

    def read_stdout(self, stream: Any) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            task, _, text = line.partition(": ")
            if task.strip().isdigit():
                self.tails[int(task)].append(text)

    def read_stderr(self, stream: Any) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            ended = endings.task_ends(line)
            if ended is not None:
                _, tasks, code = ended
                for task in tasks:
                    self.codes[task] = code
                    self.step.task_ended(task, code)
                continue
            why = endings.slurm_ending(line)
            if why is not None:
                self.step.slurm_says(why)
            lost = endings.lost_node(line)
            if lost is not None:
                self.step.node_lost(lost, why)
            task, _, text = line.partition(": ")
            self.tails[int(task) if task.strip().isdigit() else -1].append(
                text if task.strip().isdigit() else line
            )
            logger.info("srun: %s", line)
