"""Lines that several ranks print alike, within a short window, shown once with their ranks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...ui.folding import rank_ranges

GROUP_WINDOW = 0.3  # seconds at most a line waits for the other ranks to print it too
SILENT_PATIENCE = 2.0  # seconds after the first line during which silent ranks are waited for
LAG_PATIENCE = 3.0  # seconds at most a lagging rank's line waits for the other lagging ranks
# Lines shown lately that are remembered, per generation (two are kept): in a flood of lines
# a lagging rank's copy is recognised for a shorter while, and memory stays small.
RECENT_LINES = 8192


def rank_label(ranks: Iterable[int]) -> str:
    """``[rank3]``, ``[rank0-7]`` or ``[ranks 0,2,4-7]``: the label of a line ``ranks`` printed."""
    text = rank_ranges(ranks)
    return f"[rank{text}]" if "," not in text else f"[ranks {text}]"


class _Group:
    """One line as shown: its text, the ranks that printed it (a bit mask), and the lines each
    of them printed before it (``after``: shown first). Few objects per line: each one the
    kernel keeps for a while costs garbage collection time."""

    __slots__ = (
        "stream",
        "text",
        "key",
        "mask",
        "first",
        "until",
        "label",
        "after",
        "depth",
        "next",
        "done",
        "before",
        "origin",
        "quiet",
        "held",
    )

    def __init__(
        self, stream: str, text: str, key: str, first: float, until: float, label: bool
    ) -> None:
        self.stream = stream
        self.text = text
        self.key = key
        self.mask = 0
        self.first = first
        self.until = until  # when it leaves, whoever else may still print it
        self.label = label  # False: ``text`` is shown as it is (labelled already, a notice)
        self.after: Any = None  # None, a _Group or a tuple of them
        self.depth = 1  # more than the depth of every line in ``after``
        self.next = False  # a rank of it printed another line since
        self.done = False  # shown
        # A late line (lagging ranks' copy of a line shown already): the ranks shown with it
        # before, when its first copy was printed, and how long it waits for the next rank.
        self.before = 0
        self.origin = 0.0
        self.quiet = 0.0
        self.held = False  # a lagging rank's: late, or behind a late line of its rank


class LineGroups:
    """Holds the lines to show, grouping those that ranks print alike.

    A line joins a waiting line of the same text and stream that its rank has not printed when
    showing them together keeps every rank's lines in the order it printed them (each line
    keeps the lines its ranks printed before it, ``after``, and a depth above theirs; a rank
    joins a line deeper than its own last one, or one nobody printed past yet, which is then
    made deeper); otherwise it waits on its own. A line leaves once the lines before it left
    and either no other rank can join it any more, or it waited ``window`` seconds; among those
    ready, the oldest first. All leave on :meth:`take` with ``final``.

    Lagging ranks: a rank's line is late when the same line was shown less than ``lag``
    seconds ago for other ranks, without this rank (it printed it after their copy left; in a
    flood of lines, among the last RECENT_LINES lines shown at least).
    Late lines, and the lines a rank prints after a late line of its own while that waits,
    group only with each other, never with lines of the ranks ahead, which thus never wait for
    a lagging rank. They wait for the other lagging ranks as long as those keep coming: a late
    line leaves once every one of ``ranks`` has printed it (or printed past it), or when no
    rank joined it for twice the largest lag of its ranks behind the line's first copy (at
    least ``window``), and at the latest ``lag`` seconds after it began. Ranks that drift apart
    by a few seconds thus show a line in two groups (``[rank0-6] epoch 1``, then
    ``[rank7-63] epoch 1``) instead of one per ``window``. Every line leaves at most ``lag``
    seconds after it was printed (a rank's lines wait for its earlier ones, which began before).

    Ranks that have not printed yet are waited for during the first ``patience`` seconds after
    the first line (ranks start at different times); then only ranks that print are (when only
    rank 0 prints, its lines leave at once).

    Args:
        ranks: the ranks whose lines come here.
        window: seconds at most a line waits for the other ranks.
        patience: seconds after the first line during which silent ranks are waited for.
        lag: seconds at most a late line waits for the other lagging ranks, and how long after
            a line left another rank's copy of it counts as late.
    """

    def __init__(
        self,
        ranks: Iterable[int] = (),
        window: float = GROUP_WINDOW,
        patience: float = SILENT_PATIENCE,
        lag: float = LAG_PATIENCE,
    ) -> None:
        self.window = window
        self.patience = patience
        self.lag = lag
        self._silent = set(ranks)  # ranks that have not printed yet
        self._all = sum(1 << rank for rank in self._silent)  # a bit mask
        self._silent_until: float | None = None  # set by the first line
        self._waiting: list[_Group] = []  # not shown yet, oldest first
        self._open: dict[str, Any] = {}  # key -> the waiting _Group, or a list of them
        self._last: dict[int, _Group] = {}  # each rank's latest line
        self._every = 0  # the ranks in ``_last``, a bit mask
        self._labels: dict[int, str] = {}  # rank mask -> label
        # The lines shown lately, by key: (the ranks shown with it since its first copy was
        # printed, when that was, when the last copy left). Two generations of ``lag``
        # seconds or RECENT_LINES lines each: the older one is dropped whole.
        self._recent: dict[str, tuple[int, float, float]] = {}
        self._recent_before: dict[str, tuple[int, float, float]] = {}
        self._recent_since = 0.0  # when ``_recent`` began

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, rank: int, stream: str, text: str, now: float) -> None:
        """A line ``rank`` printed that may be shown with other ranks' alike."""
        if self._silent:
            self._silent.discard(rank)
        key = ("e" if stream == "stderr" else "o") + text
        last = self._last.get(rank)
        found = self._open.get(key)
        bit = 1 << rank
        held = last is not None and last.held and not last.done  # behind a late line
        before, origin, quiet = 0, 0.0, 0.0
        entry = None
        if self._recent or self._recent_before:
            entry = self._recent.get(key) or self._recent_before.get(key)
        if entry is not None and now - entry[2] < self.lag and not entry[0] & bit:
            # Shown lately without this rank: it lags.
            before, origin, _ = entry
            held = True
            quiet = min(self.lag, max(self.window, 2 * (now - origin)))
        if found is not None:
            for group in found if isinstance(found, list) else (found,):
                if (group.mask | group.before) & bit or group.held is not held:
                    continue
                if last is not None and group.depth <= last.depth:
                    if group.next:
                        continue
                    group.depth = last.depth + 1  # nothing follows it yet: it can go deeper
                if before:  # the ranks shown with the line's earlier copy
                    group.before |= before
                    group.origin = group.origin or origin
                self._join(group, rank, last, now, quiet)
                return
        group = _Group(stream, text, key, now, now + self.window, True)
        if held:
            group.held = True
            group.before, group.origin = before, origin
        self._waiting.append(group)
        self._join(group, rank, last, now, quiet)
        if found is None:
            self._open[key] = group
        elif isinstance(found, list):
            found.append(group)
        else:
            self._open[key] = [found, group]

    def add_shown(self, stream: str, text: str, now: float, rank: int = -1) -> None:
        """A line shown as it is (labelled already): it waits only for the lines before it."""
        group = _Group(stream, text, "", now, now, False)
        self._waiting.append(group)
        if rank >= 0:
            self._silent.discard(rank)
            self._join(group, rank, self._last.get(rank), now, 0.0)

    def _join(
        self, group: _Group, rank: int, last: _Group | None, now: float, quiet: float
    ) -> None:
        group.mask |= 1 << rank
        if quiet > group.quiet:
            group.quiet = quiet
        if group.quiet:  # lagging ranks' line: it waits on while they keep coming
            group.until = min(group.first + self.lag, max(group.until, now + group.quiet))
        if last is not None:
            last.next = True
            if not last.done:
                after = group.after
                group.after = last if after is None else (*_each(after), last)
            if group.depth <= last.depth:
                group.depth = last.depth + 1
        else:
            self._every |= 1 << rank
        self._last[rank] = group

    def _closed(self, group: _Group, now: float) -> bool:
        """Whether no rank can join ``group`` any more (silent ranks may, for a while)."""
        if not group.label:
            return True
        if self._silent:
            if self._silent_until is None:
                self._silent_until = group.first + self.patience
            if now < self._silent_until:
                return False
        mask = group.mask | group.before
        every = self._every
        if group.quiet:  # lagging ranks' line: ranks that never printed may be lagging too
            every |= self._all
        if mask == every:
            return True
        if not group.next or every != self._every:
            return False
        depth = group.depth
        return all(mask >> rank & 1 or last.depth >= depth for rank, last in self._last.items())

    def take(self, now: float, final: bool = False) -> list[tuple[str, str]]:
        """The lines ready to be shown, as (stream, text), in order."""
        out: list[tuple[str, str]] = []
        progress = True
        while progress and self._waiting:
            progress = False
            kept: list[_Group] = []
            for group in self._waiting:
                ready = final or now >= group.until or self._closed(group, now)
                after = group.after
                if not ready or (after is not None and not all(b.done for b in _each(after))):
                    kept.append(group)
                    continue
                progress = True
                group.after = None
                out.append(self._shown(group, now))
            self._waiting = kept
        return out

    def _shown(self, group: _Group, now: float) -> tuple[str, str]:
        group.done = True
        if not group.label:
            return (group.stream, group.text)
        key = group.key
        found = self._open[key]
        if found is group:
            del self._open[key]
        else:
            found.remove(group)
            if len(found) == 1:
                self._open[key] = found[0]
        mask = group.mask
        self._remember(key, group, now)
        label = self._labels.get(mask)
        if label is None:
            if len(self._labels) > 4096:  # a few sets recur; many differ only when ranks drift
                self._labels.clear()
            label = self._labels[mask] = rank_label(
                rank for rank in range(mask.bit_length()) if mask >> rank & 1
            )
        return (group.stream, f"{label} {group.text}")

    def _remember(self, key: str, group: _Group, now: float) -> None:
        """Note that ``group`` left: a rank that prints its line a moment later, not having
        printed it since its first copy was printed, lags."""
        shown = self._recent
        entry = shown.get(key) or self._recent_before.get(key)
        mask = group.mask
        if entry is not None and now - entry[2] < self.lag:
            before, origin, _ = entry
            if group.before:
                if origin != group.origin:
                    return  # the ranks ahead printed the line again since: that copy counts
                mask |= before
            elif not before & mask:  # other ranks' copy of it
                mask |= before
            else:
                origin = group.first
        elif group.before or (mask == self._every and not self._silent and entry is None):
            return  # every rank printed it: nobody lags behind it
        else:
            origin = group.first
        shown[key] = (mask, origin, now)
        if now - self._recent_since >= self.lag or len(shown) >= RECENT_LINES:
            self._recent_before, self._recent = shown, {}
            self._recent_since = now


def _each(after: Any) -> tuple:
    return after if isinstance(after, tuple) else (after,)
