"""XLA (TPU): replicas started by torch_xla's ``xmp.spawn``, supervised like any worker.

``xmp.spawn`` blocks until every replica returns and starts the replicas itself, so the kernel
starts one helper process that calls it (see :mod:`notebook_launcher.worker.xla_replica`) and keeps supervising. Every
rank still gets its own event and output pipes, made here, and the supervisor sees each replica
as one worker: its events, its output with its rank label, its exit (reported by the helper).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import cloudpickle
import torch.multiprocessing as tmp

from ..protocol.channel import LineSplitter
from ..protocol.events import OutputLine
from ..protocol.names import XLA_HELPER_ENTRY, entry_point
from ..protocol.spec import ReplicaGroup, ReplicaPipes, WorkerSpec
from .base import Launcher, WorkerHandle
from .output import FATAL_MARK
from .processes import kill_tree

KILLED = -9  # the exit code reported when the helper vanished without saying (it was killed)
PROCESS_MARK = "(process) "  # starts the lines of a process of thread replicas, not of one replica


class ProcessLineSplitter(LineSplitter):
    """The file-descriptor level output of a process whose replicas are threads.

    Such a process has one fd 1 and one fd 2 for all its replicas, so what reaches them (C and
    C++ libraries, the XLA runtime, threads no replica started) cannot be told apart by replica:
    the lines go with the process's first rank, marked with :data:`PROCESS_MARK`. A crash
    report (from faulthandler's first line on) is left as it was written, to be read as one.
    """

    def __init__(self, rank: int, stream: str) -> None:
        super().__init__(rank, stream)
        self._crashed = False

    def _line(self, raw: bytes) -> OutputLine:
        line = super()._line(raw)
        self._crashed = self._crashed or line.text.startswith(FATAL_MARK)
        if self._crashed:
            return line
        return dataclasses.replace(line, text=PROCESS_MARK + line.text)


class _Helper:
    """The kernel's side of one helper process and the replicas below it."""

    def __init__(self, process: Any, count: int) -> None:
        self.process = process
        self.count = count
        self.exited: set[int] = set()

    def replica_exited(self, local_rank: int) -> None:
        self.exited.add(local_rank)
        if len(self.exited) == self.count:
            self.stop(grace=1.0)

    def stop(self, grace: float = 0.0) -> None:
        """Reap the helper; kill it and what is left below it if it does not end in ``grace``."""
        self.process.join(grace)
        if self.process.exitcode is None:
            kill_tree(self.process.pid)
            self.process.join(1.0)


class ReplicaProcess:
    """Looks like a ``multiprocessing.Process`` to the supervisor, for one replica.

    Its ``sentinel`` becomes readable when the helper reports that the replica's process exited
    (or when the helper is gone); ``exitcode`` is the code the helper reported.
    """

    def __init__(self, helper: _Helper, local_rank: int, flag: Any) -> None:
        self._helper = helper
        self._local_rank = local_rank
        self._flag = flag
        self.sentinel = flag.fileno()
        self.exitcode: int | None = None

    @property
    def pid(self) -> int | None:
        return self._helper.process.pid

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is not None:
            return
        try:
            ready = self._flag.poll(timeout)
        except (OSError, ValueError):
            ready = True
        if not ready:
            if timeout:  # a teardown waited in vain: nothing below the helper may survive
                self._helper.stop()
                self._exit(KILLED)
            return
        try:
            code = self._flag.recv()
        except (EOFError, OSError, ValueError):
            code = KILLED  # the helper ended without a report: it was killed
        self._exit(int(code))

    def _exit(self, code: int) -> None:
        self.exitcode = code
        self._flag.close()
        self._helper.replica_exited(self._local_rank)

    def is_alive(self) -> bool:
        return self.exitcode is None


class XlaLauncher(Launcher):
    """Launches through ``xmp.spawn(fn, args=..., start_method="fork")`` in a helper process.

    The first :meth:`start` of an attempt (local rank 0) makes the pipes of every rank and starts
    the helper; each call returns the handle of its rank.
    """

    start_method = "xla"

    def __init__(self) -> None:
        self.context = tmp.get_context("fork")  # the helper is forked; xmp forks the replicas
        self._pending: dict[int, WorkerHandle] = {}

    def payload(self, function: Any, args: tuple) -> Any:
        # xmp pickles what it ships to the replicas, even under fork; cloudpickle carries
        # functions, lambdas and classes defined in notebook cells by value.
        return cloudpickle.dumps((function, args))

    def start(self, spec: WorkerSpec, payload: Any, now: float) -> WorkerHandle:
        local_rank = spec.context.local_rank
        if local_rank == 0:
            self._pending = self._start_group(spec, payload, now)
        try:
            handle = self._pending.pop(local_rank)
        except KeyError:
            raise RuntimeError(
                f"the XLA launcher starts every replica with local rank 0; local rank "
                f"{local_rank} was asked for first"
            ) from None
        handle.started_at = handle.last_alive = now
        return handle

    def _start_group(self, spec: WorkerSpec, payload: bytes, now: float) -> dict[int, WorkerHandle]:
        ctx = self.context
        count = spec.context.local_world_size
        first = spec.context.rank - spec.context.local_rank
        specs = [
            dataclasses.replace(
                spec, context=dataclasses.replace(spec.context, rank=first + r, local_rank=r)
            )
            for r in range(count)
        ]
        kernel_ends, child_pipes = [], []
        for _ in range(count):
            # events, stdout, stderr, exited, and the process's stdout and stderr (see
            # ReplicaPipes: used where this rank is the first of a process of thread replicas)
            ends = [ctx.Pipe(duplex=False) for _ in range(6)]
            kernel_ends.append([r for r, _ in ends])
            child_pipes.append(ReplicaPipes(*(w for _, w in ends)))
        hello_r, hello_w = ctx.Pipe(duplex=False)
        group = ReplicaGroup(spec.parent_pid, specs, child_pipes, hello_r, hello_w)
        process = ctx.Process(
            target=entry_point(XLA_HELPER_ENTRY),
            args=(group, payload),
            name="notebook_launcher-xmp",
            daemon=False,
        )
        try:
            process.start()
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
        helper = _Helper(process, count)
        handles = {}
        for r, (events, out, err, flag, process_out, process_err) in enumerate(kernel_ends):
            rank = first + r
            handles[r] = WorkerHandle(
                rank=rank,
                local_rank=r,
                process=ReplicaProcess(helper, r, flag),
                events=events,
                streams={
                    out: LineSplitter(rank, "stdout"),
                    err: LineSplitter(rank, "stderr"),
                    process_out: ProcessLineSplitter(rank, "stdout"),
                    process_err: ProcessLineSplitter(rank, "stderr"),
                },
                pid=process.pid,  # the replica's own pid replaces it once it has started
                started_at=now,
                last_alive=now,
            )
        return handles
