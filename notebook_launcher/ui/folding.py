"""Many ranks on one screen: alike rows of the status table folded into one, bars summed up.

Up to :data:`FOLD_ABOVE` ranks the table has a row per rank. With more, ranks whose rows would
read alike (same node, state, progress, step, status and latest line) share one row, labelled
with their ranks (``0-63``); ranks that differ keep rows of their own. When that still gives
more than :data:`MAX_ROWS` rows, the latest line and the counts are left out of the likeness
(the row then shows the range they span), and after that everything but the node, the state and
the error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .model import RankState

FOLD_ABOVE = 8  # ranks up to which the table has a row per rank
MAX_ROWS = 12  # rows of a folded table, at most (one per node and state, beyond that)
RANK_LINES_VARIABLE = "NOTEBOOK_LAUNCHER_RANK_LINES"


def rank_ranges(ranks: Iterable[int]) -> str:
    """``"3"``, ``"0-7"`` or ``"0,2,4-7"``: a set of ranks in short."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def rank_lines_up_to() -> int:
    """Ranks up to which charts draw a line per rank and the table a row per rank.

    :data:`FOLD_ABOVE`, or the number in the ``NOTEBOOK_LAUNCHER_RANK_LINES`` environment
    variable (``NOTEBOOK_LAUNCHER_RANK_LINES=64``: every rank of a 64-rank run on its own).

    Raises:
        ValueError: the variable is set to something else than a whole number >= 1.
    """
    given = os.environ.get(RANK_LINES_VARIABLE, "").strip()
    if not given:
        return FOLD_ABOVE
    if not given.isdigit() or int(given) < 1:
        raise ValueError(
            f"{RANK_LINES_VARIABLE}={given!r} is not valid: expected a whole number >= 1 "
            "(ranks up to which charts draw a line and the table a row per rank)"
        )
    return int(given)


@dataclass
class Row:
    """One row of the status table: a rank, or ranks that read alike (``ranks[0]`` speaks for
    them; ``low``/``high`` are the smallest and largest step or count among them)."""

    ranks: list[RankState]
    low: float | None = None
    high: float | None = None

    @property
    def first(self) -> RankState:
        return self.ranks[0]

    @property
    def label(self) -> str:
        return rank_ranges(state.rank for state in self.ranks)


def _key(state: RankState, level: int) -> tuple:
    common = (state.node, state.state, state.blamed, state.error, state.stop_reason)
    if level == 2:
        return common
    common += (state.notice, state.status, state.desc, state.total)
    if level == 1:
        return common
    return (*common, state.done, state.step, state.last_line)


def _fold(ranks: Sequence[RankState], level: int) -> list[Row]:
    rows: dict[tuple, Row] = {}
    for state in ranks:
        row = rows.get(_key(state, level))
        if row is None:
            row = rows[_key(state, level)] = Row([])
        row.ranks.append(state)
    for row in rows.values():
        counts = [s.step if s.step is not None else s.done for s in row.ranks]
        known = [c for c in counts if c is not None]
        if known:
            row.low, row.high = min(known), max(known)
    return sorted(rows.values(), key=lambda row: (row.first.node, row.first.rank))


def fold_rows(ranks: Sequence[RankState], up_to: int | None = None) -> list[Row]:
    """The rows of the status table: one per rank up to ``up_to`` ranks
    (:func:`rank_lines_up_to`), else alike ranks folded, grouped by node."""
    if len(ranks) <= (rank_lines_up_to() if up_to is None else up_to):
        return [Row([state]) for state in ranks]
    for level in (0, 1):
        rows = _fold(ranks, level)
        if len(rows) <= MAX_ROWS:
            return rows
    return _fold(ranks, 2)


@dataclass
class BarSummary:
    """One progress bar (a description) across the ranks that show it: the slowest and the
    fastest of them."""

    desc: str
    total: int | None
    slowest: RankState
    fastest: RankState
    count: int  # ranks showing it


def bar_summaries(ranks: Sequence[RankState]) -> list[BarSummary]:
    """One :class:`BarSummary` per description shown in the ranks' progress columns."""
    bars: dict[tuple[str, int | None], list[RankState]] = {}
    for state in ranks:
        if state.done is not None:
            bars.setdefault((state.desc or "", state.total), []).append(state)
    found = []
    for (desc, total), states in bars.items():
        ordered = sorted(states, key=lambda s: (s.done, -s.rank))
        found.append(BarSummary(desc, total, ordered[0], ordered[-1], len(states)))
    return found
