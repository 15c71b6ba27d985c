"""Worker output: raw pipe bytes -> whole lines -> the launching cell, labelled by rank."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable

from ..protocol.events import OutputLine

FATAL_MARK = "Fatal Python error:"  # how faulthandler starts its report of a crash
FATAL_LINES = 400  # lines of a crash report kept (faulthandler prints at most 100 frames a thread)


class OutputSink:
    """Keeps each rank's recent lines and writes the shown ones to the kernel's streams.

    Writes happen from the supervising thread only, one whole line per write, so lines from
    different ranks can never be glued together.
    """

    def __init__(
        self,
        policy: str,
        prefix: Callable[[int], str],
        tail_lines: int = 20,
        stdout=None,
        stderr=None,
    ) -> None:
        self.policy = policy
        self.prefix = prefix
        self._tails: dict[int, deque[str]] = {}
        self._fatal: dict[int, list[str]] = {}
        self._tail_lines = tail_lines
        self._stdout = stdout
        self._stderr = stderr

    def shows(self, rank: int) -> bool:
        return self.policy == "all" or (self.policy == "main" and rank == 0)

    def write(self, line: OutputLine) -> None:
        labelled = self.prefix(line.rank) + line.text
        self._tails.setdefault(line.rank, deque(maxlen=self._tail_lines)).append(labelled)
        if line.text.startswith(FATAL_MARK):
            self._fatal[line.rank] = []
        report = self._fatal.get(line.rank)
        if report is not None and len(report) < FATAL_LINES:
            report.append(line.text)
        if self.shows(line.rank):
            self.notice(labelled, line.stream)

    def notice(self, text: str, stream: str = "stderr") -> None:
        """Write a line of the launcher's own (or a shown worker line) to the kernel's streams."""
        if stream == "stdout":
            target = self._stdout or sys.stdout
        else:
            target = self._stderr or sys.stderr
        target.write(text + "\n")
        target.flush()

    def tail(self, rank: int) -> tuple[str, ...]:
        return tuple(self._tails.get(rank, ()))

    def crash_report(self, rank: int) -> list[str]:
        """The crash report (fatal error and the frames of each thread) a rank printed."""
        return list(self._fatal.get(rank, ()))
