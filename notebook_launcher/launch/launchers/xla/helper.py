"""The kernel's side of the xmp.spawn helper process and of the replicas below it."""

from __future__ import annotations

import dataclasses
from typing import Any

from ....protocol.channel import LineSplitter
from ....protocol.events import OutputLine
from ...processes.process_tree import kill_tree
from ...supervision.output import FATAL_MARK

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

    def _line(self, raw: bytes, stream: str | None = None) -> OutputLine:
        line = super()._line(raw, stream)
        self._crashed = self._crashed or line.text.startswith(FATAL_MARK)
        if self._crashed:
            return line
        return dataclasses.replace(line, text=PROCESS_MARK + line.text)


class Helper:
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

    def __init__(self, helper: Helper, local_rank: int, flag: Any) -> None:
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
