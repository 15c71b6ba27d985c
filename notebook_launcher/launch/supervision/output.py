"""Worker output: whole lines -> the launching cell, labelled by rank, alike lines grouped."""

from __future__ import annotations

import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable

from ...protocol.events import OutputLine
from ...utils.environment import one_output_area
from .grouping import GROUP_WINDOW, LineGroups

FATAL_MARK = "Fatal Python error:"  # how faulthandler starts its report of a crash
FATAL_LINES = 400  # lines of a crash report kept (faulthandler prints at most 100 frames a thread)
# Labels the libraries add themselves once a process knows its rank: torch's C++ log messages
# ("[rank0]:[W ...]") and its excepthook ("[rank0]: Traceback ..."), Lightning's rank_zero
# messages ("[rank: 0] Seed set to 42"). Ours already says the rank.
OWN_LABEL = re.compile(r"\[rank(?:(\d+)\]:|: (\d+)\]) ?")
KEPT_LINES = 100_000  # lines of each rank kept for ``result.output(rank)`` (the oldest go first)
# stderr lines that read as a problem (a traceback, a warning, an error, torch's C++ warnings
# and errors), coloured red when the output shares one stream; other stderr lines (progress
# bars, logging) are plain.
PROBLEM = re.compile(
    r"Traceback \(most recent call last\)|^\s+(File \"|\^)|\w*(Error|Exception|Warning)\b"
    r"|^(ERROR|WARNING|CRITICAL|FATAL)\b|^\[?[WEF]\d{4} |^Fatal Python error"
)
RED, PLAIN = "\x1b[31m", "\x1b[0m"
# A tqdm bar's line in its standard formats, with and without a total: what it shows, then its
# timings in brackets ("epoch 1: 100%|██████████| 30/30 [00:01<00:00, 29.8it/s]"). The timings
# differ from rank to rank; without them the ranks' alike bars are shown once.
BAR_CHARS = 1000  # longer lines are not a bar's
TQDM_LINE = re.compile(
    r"^(?P<bar>.*?\d+%\|[^|]*\| *[\d.]+[kMGT]?/[\d.]+[kMGT]?"
    r"|(?:.*?: )?[\d.]+[kMGT]?(?:it|B|[a-zA-Z]+)?) \[\d+:\d\d(?::\d\d)?[<,][^\]]*\]$"
)
# A rich.progress bar's line, as a Progress writes each task once it stops off a terminal: its
# columns side by side, the bar a run of "━" ("╸", "╺" where it is cut) as no colours tell done
# from to do ("epoch 1 ━━━━━━━━ 100% 15/15 0:00:01"). Its times (elapsed, remaining: "0:00:01",
# "1 day, 2:03:04", compact "00:01", "-:--:--") and speeds ("31.2 it/s", "5.0 MB/s", "12 bytes/s")
# differ from rank to rank, whichever column shows them; the rest of the line is shown.
RICH_BAR_CHAR = "━"
RICH_BAR = re.compile("[━╸╺]{3}")
RICH_TIMINGS = re.compile(
    r"\s*(?<!\S)(?:(?:\d+ days?, )?(?:\d+:)?\d\d:\d\d|-:--:--|--:--"
    r"|[\d,]+(?:\.\d+)?(?:e[+-]?\d+)?(?:×10[¹²³⁶⁹]+)? ?(?:it|bytes?|[kMGTPEZY]B)/s)(?!\S)"
)


def without_own_label(text: str, rank: int) -> str:
    """``text`` less a leading rank label of ``rank`` that a library added (another rank's stays)."""
    if not text.startswith("[rank"):
        return text
    match = OWN_LABEL.match(text)
    if match is None or int(match[1] or match[2]) != rank:
        return text
    return text[match.end() :]


class OutputSink:
    """Keeps each rank's lines and writes the shown ones to the kernel's streams.

    Lines are held until :meth:`flush` (the worker group calls it once it has handled what it
    read, so a burst of lines costs one write) or the next notice; then each run of lines of
    one stream goes out in one write, whole lines only, each rank's in the order it wrote them.
    With ``policy`` "all", a line that several ranks print alike is shown once, labelled with
    their ranks (``[rank0-7] text``; see :class:`.grouping.LineGroups`); "raw" shows every line of every
    rank as it comes. In a notebook every line goes to the cell's stdout (each switch between
    stdout and stderr would start another output area), stderr lines that read as a problem
    in red; elsewhere stderr lines go to stderr. The writes happen from the supervising thread
    only, so lines from different ranks can never be glued together.

    Args:
        policy: "all", "raw", "main" or "none" (see ``notebook_launcher``'s ``output``).
        prefix: the label of a rank's lines.
        tail_lines: lines of each rank kept for a failure report.
        stdout, stderr: where the lines go (default: ``sys.stdout`` / ``sys.stderr``).
        ranks: the ranks whose lines come here (a line is held for those that have not
            printed yet, up to ``window``).
        window: seconds a line waits for other ranks to print it too.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        policy: str,
        prefix: Callable[[int], str],
        tail_lines: int = 20,
        stdout=None,
        stderr=None,
        ranks: Iterable[int] = (),
        window: float = GROUP_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.prefix = prefix
        self.clock = clock
        self._tails: dict[int, deque[str]] = {}
        self._kept: dict[int, deque[str]] = {}
        self._fatal: dict[int, list[str]] = {}
        self._tail_lines = tail_lines
        self._prefix_names_rank: dict[int, bool] = {}
        self._stdout = stdout
        self._stderr = stderr
        self._prefixes: dict[int, str] = {}
        self._groups = LineGroups(ranks if policy == "all" else (), window)
        self.also_shown: set[int] = set()  # ranks shown whatever the policy (in a debugger)

    def shows(self, rank: int) -> bool:
        return (
            self.policy in ("all", "raw")
            or (self.policy == "main" and rank == 0)
            or rank in self.also_shown
        )

    def begin_call(self) -> None:
        """A new session call starts: its failure reports and ``output`` hold its lines only."""
        self.flush(final=True)
        self._tails.clear()
        self._kept.clear()
        self._fatal.clear()

    def write(self, line: OutputLine) -> None:
        rank = line.rank
        prefix = self._prefixes.get(rank)
        if prefix is None:
            prefix = self._prefixes[rank] = self.prefix(rank)
        text = line.text
        if self._names_rank(rank, prefix):
            text = without_own_label(text, rank)
        labelled = prefix + text
        self._tails.setdefault(rank, deque(maxlen=self._tail_lines)).append(labelled)
        kept = self._kept.get(rank)
        if kept is None:
            kept = self._kept[rank] = deque(maxlen=KEPT_LINES)
        kept.append(text)
        if text.startswith(FATAL_MARK):
            self._fatal[rank] = []
        report = self._fatal.get(rank)
        if report is not None and len(report) < FATAL_LINES:
            report.append(text)
        if not self.shows(rank):
            return
        if self.policy == "all" and prefix == f"[rank{rank}] ":
            if line.stream == "stderr" or RICH_BAR_CHAR in text:  # tqdm's stream, or rich's bar
                text = without_timings(text)
            self._groups.add(rank, line.stream, text, self.clock())
        else:
            self._groups.add_shown(line.stream, labelled, self.clock(), rank)

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
        held so far (in a notebook to the cell's one output area, as plain text)."""
        self._groups.add_shown(stream, text, self.clock())
        self.flush(final=True)

    def flush(self, final: bool = False) -> None:
        """Write the lines ready (every line held, with ``final``): one write per run of lines
        of one stream."""
        if not len(self._groups):
            return
        ready = self._groups.take(self.clock(), final)
        if not ready:
            return
        stdout = self._stdout or sys.stdout
        if one_output_area(stdout):
            ready = [("stdout", _coloured(stream, text)) for stream, text in ready]
        start = 0
        while start < len(ready):
            stream = ready[start][0]
            end = start + 1
            while end < len(ready) and ready[end][0] == stream:
                end += 1
            target = stdout if stream == "stdout" else (self._stderr or sys.stderr)
            target.write("".join(text + "\n" for _, text in ready[start:end]))
            target.flush()
            start = end

    def tail(self, rank: int) -> tuple[str, ...]:
        return tuple(self._tails.get(rank, ()))

    def output(self, rank: int) -> list[str]:
        """Every line ``rank`` printed (since the session call began), unlabelled."""
        return list(self._kept.get(rank, ()))

    def outputs(self) -> dict[int, list[str]]:
        """:meth:`output` of every rank that printed."""
        return {rank: list(lines) for rank, lines in sorted(self._kept.items())}

    def crash_report(self, rank: int) -> list[str]:
        """The crash report (fatal error and the frames of each thread) a rank printed."""
        return list(self._fatal.get(rank, ()))


def without_timings(text: str) -> str:
    """A tqdm or rich bar's line less its timings and speeds (any other line as it is)."""
    if len(text) > BAR_CHARS:
        return text
    if RICH_BAR_CHAR in text and RICH_BAR.search(text):
        return RICH_TIMINGS.sub("", text).rstrip()
    if not text.endswith("]"):
        return text
    match = TQDM_LINE.match(text)
    return text if match is None else match["bar"]


def _coloured(stream: str, text: str) -> str:
    if stream == "stderr" and PROBLEM.search(text) and "%|" not in text:
        return f"{RED}{text}{PLAIN}"
    return text
