"""Worker output: raw pipe bytes -> whole lines -> the launching cell, labelled by rank."""

from __future__ import annotations

import re
import sys
from collections import deque
from collections.abc import Callable

from ...protocol.events import OutputLine

FATAL_MARK = "Fatal Python error:"  # how faulthandler starts its report of a crash
FATAL_LINES = 400  # lines of a crash report kept (faulthandler prints at most 100 frames a thread)
# Labels the libraries add themselves once a process knows its rank: torch's C++ log messages
# ("[rank0]:[W ...]") and its excepthook ("[rank0]: Traceback ..."), Lightning's rank_zero
# messages ("[rank: 0] Seed set to 42"). Ours already says the rank.
OWN_LABEL = re.compile(r"\[rank(?:(\d+)\]:|: (\d+)\]) ?")


def without_own_label(text: str, rank: int) -> str:
    """``text`` less a leading rank label of ``rank`` that a library added (another rank's stays)."""
    if not text.startswith("[rank"):
        return text
    match = OWN_LABEL.match(text)
    if match is None or int(match[1] or match[2]) != rank:
        return text
    return text[match.end() :]


class OutputSink:
    """Keeps each rank's recent lines and writes the shown ones to the kernel's streams.

    Lines are held until :meth:`flush` (the worker group calls it once it has handled what it
    read, so a burst of lines costs one write and one flush) or the next notice; then each run
    of lines of one stream goes out in one write, whole lines only, in the order they came. The
    writes happen from the supervising thread only, so lines from different ranks can never be
    glued together.
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
        self._prefix_names_rank: dict[int, bool] = {}
        self._stdout = stdout
        self._stderr = stderr
        self._prefixes: dict[int, str] = {}
        self._pending: list[tuple[str, str]] = []  # (stream, text) not written yet
        self.also_shown: set[int] = set()  # ranks shown whatever the policy (in a debugger)

    def shows(self, rank: int) -> bool:
        return (
            self.policy == "all" or (self.policy == "main" and rank == 0) or rank in self.also_shown
        )

    def write(self, line: OutputLine) -> None:
        prefix = self._prefixes.get(line.rank)
        if prefix is None:
            prefix = self._prefixes[line.rank] = self.prefix(line.rank)
        text = line.text
        if self._names_rank(line.rank, prefix):
            text = without_own_label(text, line.rank)
        labelled = prefix + text
        self._tails.setdefault(line.rank, deque(maxlen=self._tail_lines)).append(labelled)
        if text.startswith(FATAL_MARK):
            self._fatal[line.rank] = []
        report = self._fatal.get(line.rank)
        if report is not None and len(report) < FATAL_LINES:
            report.append(text)
        if self.shows(line.rank):
            self._pending.append((line.stream, labelled))

    def _names_rank(self, rank: int, prefix: str) -> bool:
        """Whether our label names the rank, so a library's label of it says nothing more (a
        ``log_line_prefix_template`` without the global rank keeps the libraries' labels)."""
        names = self._prefix_names_rank.get(rank)
        if names is None:
            names = re.search(rf"(?<!\d){rank}(?!\d)", prefix) is not None
            self._prefix_names_rank[rank] = names
        return names

    def notice(self, text: str, stream: str = "stderr") -> None:
        """Write a line of the launcher's own to the kernel's streams, after the worker lines
        held so far."""
        self._pending.append((stream, text))
        self.flush()

    def flush(self) -> None:
        """Write the lines held so far: one write (and flush) per run of lines of one stream."""
        pending, self._pending = self._pending, []
        start = 0
        while start < len(pending):
            stream = pending[start][0]
            end = start + 1
            while end < len(pending) and pending[end][0] == stream:
                end += 1
            target = (
                (self._stdout or sys.stdout) if stream == "stdout" else (self._stderr or sys.stderr)
            )
            target.write("".join(text + "\n" for _, text in pending[start:end]))
            target.flush()
            start = end

    def tail(self, rank: int) -> tuple[str, ...]:
        return tuple(self._tails.get(rank, ()))

    def crash_report(self, rank: int) -> list[str]:
        """The crash report (fatal error and the frames of each thread) a rank printed."""
        return list(self._fatal.get(rank, ()))
