"""XLA (TPU): replicas started by torch_xla's ``xmp.spawn``, supervised like any worker.

``xmp.spawn`` blocks until every replica returns and starts the replicas itself, so the kernel
starts one helper process that calls it (see :mod:`notebook_launcher.worker.xla_replica`) and
keeps supervising. Every rank still gets its own event and output pipes, made here, and the
supervisor sees each replica as one worker: its events, its output with its rank label, its exit
(reported by the helper, see :mod:`.helper`).
"""

from __future__ import annotations

from typing import Any

import torch.multiprocessing as tmp

from ....protocol.channel import LineSplitter
from ....protocol.names import XLA_HELPER_ENTRY, entry_point
from ....protocol.spec import ReplicaGroup, ReplicaPipes, WorkerSpec
from ....utils.openmp import release_thread_pools
from ....utils.validation import invalid
from ...processes import janitor
from ..base import Launcher, WorkerHandle
from .helper import Helper, ProcessLineSplitter, ReplicaProcess


class XlaLauncher(Launcher):
    """Launches through ``xmp.spawn(fn, args=..., start_method="fork")`` in a helper process,
    which starts one replica per XLA device."""

    start_method = "xla"
    selectable = False  # the device decides: every launch on an XLA host goes through xmp
    ships_by_value = True  # xmp pickles what it ships to the replicas, even under fork
    runs_sessions = False
    pickle_advice = (
        "On XLA devices torch_xla's xmp.spawn pickles the function and its arguments to start "
        "the replicas, even though it forks them, so nothing is inherited; notebook_launcher "
        "sends them with cloudpickle, which carries functions, lambdas and classes defined in "
        "the notebook by value but not locks, open files, sockets, threads or processes. Pass "
        "something picklable instead (a path, a config, plain tensors) and create the object "
        "inside the function; start_method does not change this on XLA."
    )

    def __init__(self) -> None:
        self.context = tmp.get_context("fork")  # the helper is forked; xmp forks the replicas

    def prepare(self) -> None:
        release_thread_pools()  # the replicas are forked from a fork of this thread

    @classmethod
    def check_group(cls, num_processes: int, num_nodes: int, devices: int) -> None:
        """xmp.spawn starts one replica per device, so the count is not ours to pick."""
        if devices and num_processes != devices:
            raise invalid(
                "num_processes",
                num_processes,
                f"on this XLA host xmp.spawn starts one replica per device, {devices} here; "
                f"pass num_processes={devices} or None",
            )
        if num_nodes != 1:
            raise invalid("num_nodes", num_nodes, "XLA launches run on one host (num_nodes=1)")

    def start_group(self, specs: list[WorkerSpec], payload: Any, now: float) -> list[WorkerHandle]:
        ctx = self.context
        kernel_ends, child_pipes = [], []
        for _ in specs:
            # events, stdout, stderr, exited, and the process's stdout and stderr (see
            # ReplicaPipes: used where this rank is the first of a process of thread replicas)
            ends = [ctx.Pipe(duplex=False) for _ in range(6)]
            kernel_ends.append([r for r, _ in ends])
            child_pipes.append(ReplicaPipes(*(w for _, w in ends)))
        hello_r, hello_w = ctx.Pipe(duplex=False)
        group = ReplicaGroup(specs[0].parent_pid, list(specs), child_pipes, hello_r, hello_w)
        process = ctx.Process(
            target=entry_point(XLA_HELPER_ENTRY),
            args=(group, payload),
            name="notebook_launcher-xmp",
            daemon=False,
        )
        try:
            process.start()
            janitor.watch(process.pid)  # the replicas die with it
        except BaseException:
            for conn in [c for ends in kernel_ends for c in ends]:
                conn.close()
            raise
        finally:
            for pipes in child_pipes:
                for conn in pipes.connections():
                    conn.close()
            hello_r.close()
            hello_w.close()
        helper = Helper(process, len(specs))
        handles = []
        for spec, (events, out, err, flag, process_out, process_err) in zip(
            specs, kernel_ends, strict=True
        ):
            rank, local_rank = spec.context.rank, spec.context.local_rank
            handles.append(
                WorkerHandle(
                    rank=rank,
                    local_rank=local_rank,
                    process=ReplicaProcess(helper, local_rank, flag),
                    events=events,
                    streams={
                        out: LineSplitter(rank, "stdout"),
                        err: LineSplitter(rank, "stderr"),
                        process_out: ProcessLineSplitter(rank, "stdout"),
                        process_err: ProcessLineSplitter(rank, "stderr"),
                    },
                    pid=process.pid,  # the replica's own pid replaces it once it has started
                    last_alive=now,
                )
            )
        return handles
