"""Lines that several ranks print alike, within a short window, shown once with their ranks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...ui.folding import rank_ranges

GROUP_WINDOW = 0.3  # seconds at most a line waits for the other ranks to print it too
SILENT_PATIENCE = 2.0  # seconds after the first line during which silent ranks are waited for


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
        "count",
        "first",
        "label",
        "after",
        "depth",
        "next",
        "done",
    )

    def __init__(self, stream: str, text: str, key: str, first: float, label: bool) -> None:
        self.stream = stream
        self.text = text
        self.key = key
        self.mask = 0
        self.count = 0
        self.first = first
        self.label = label  # False: ``text`` is shown as it is (labelled already, a notice)
        self.after: Any = None  # None, a _Group or a tuple of them
        self.depth = 1  # more than the depth of every line in ``after``
        self.next = False  # a rank of it printed another line since
        self.done = False  # shown


class LineGroups:
    """Holds the lines to show, grouping those that ranks print alike.

    A line joins a waiting line of the same text and stream that its rank has not printed when
    showing them together keeps every rank's lines in the order it printed them (each line
    keeps the lines its ranks printed before it, ``after``, and a depth above theirs; a rank
    joins a line deeper than its own last one, or one nobody printed past yet, which is then
    made deeper); otherwise it waits on its own. A line leaves once the lines before it left
    and either no other rank can join it any more, or it waited ``window`` seconds; among those
    ready, the oldest first. All leave on :meth:`take` with ``final``.

    Ranks that have not printed yet are waited for during the first ``patience`` seconds after
    the first line (ranks start at different times); then only ranks that print are (when only
    rank 0 prints, its lines leave at once).

    Args:
        ranks: the ranks whose lines come here.
        window: seconds at most a line waits for the other ranks.
        patience: seconds after the first line during which silent ranks are waited for.
    """

    def __init__(
        self,
        ranks: Iterable[int] = (),
        window: float = GROUP_WINDOW,
        patience: float = SILENT_PATIENCE,
    ) -> None:
        self.window = window
        self.patience = patience
        self._silent = set(ranks)  # ranks that have not printed yet
        self._silent_until: float | None = None  # set by the first line
        self._waiting: list[_Group] = []  # not shown yet, oldest first
        self._open: dict[str, Any] = {}  # key -> the waiting _Group, or a list of them
        self._last: dict[int, _Group] = {}  # each rank's latest line
        self._labels: dict[int, str] = {}  # rank mask -> label

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, rank: int, stream: str, text: str, now: float) -> None:
        """A line ``rank`` printed that may be shown with other ranks' alike."""
        if self._silent:
            self._silent.discard(rank)
        key = ("e" if stream == "stderr" else "o") + text
        last = self._last.get(rank)
        found = self._open.get(key)
        if found is not None:
            bit = 1 << rank
            for group in found if isinstance(found, list) else (found,):
                if group.mask & bit:
                    continue
                if last is None or group.depth > last.depth:
                    self._join(group, rank, last)
                    return
                if not group.next:  # nothing follows it yet: it can go deeper
                    group.depth = last.depth + 1
                    self._join(group, rank, last)
                    return
        group = _Group(stream, text, key, now, True)
        self._waiting.append(group)
        self._join(group, rank, last)
        if found is None:
            self._open[key] = group
        elif isinstance(found, list):
            found.append(group)
        else:
            self._open[key] = [found, group]

    def add_shown(self, stream: str, text: str, now: float, rank: int = -1) -> None:
        """A line shown as it is (labelled already): it waits only for the lines before it."""
        group = _Group(stream, text, "", now, False)
        self._waiting.append(group)
        if rank >= 0:
            self._silent.discard(rank)
            self._join(group, rank, self._last.get(rank))

    def _join(self, group: _Group, rank: int, last: _Group | None) -> None:
        group.mask |= 1 << rank
        group.count += 1
        if last is not None:
            last.next = True
            if not last.done:
                after = group.after
                group.after = last if after is None else (*_each(after), last)
            if group.depth <= last.depth:
                group.depth = last.depth + 1
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
        if group.count == len(self._last):
            return True
        if not group.next:
            return False
        depth, mask = group.depth, group.mask
        return all(mask >> rank & 1 or last.depth >= depth for rank, last in self._last.items())

    def take(self, now: float, final: bool = False) -> list[tuple[str, str]]:
        """The lines ready to be shown, as (stream, text), in order."""
        out: list[tuple[str, str]] = []
        window = self.window
        progress = True
        while progress and self._waiting:
            progress = False
            kept: list[_Group] = []
            for group in self._waiting:
                ready = final or now - group.first >= window or self._closed(group, now)
                after = group.after
                if not ready or (after is not None and not all(b.done for b in _each(after))):
                    kept.append(group)
                    continue
                progress = True
                group.after = None
                out.append(self._shown(group))
            self._waiting = kept
        return out

    def _shown(self, group: _Group) -> tuple[str, str]:
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
        label = self._labels.get(mask)
        if label is None:
            if len(self._labels) > 4096:  # a few sets recur; many differ only when ranks drift
                self._labels.clear()
            label = self._labels[mask] = rank_label(
                rank for rank in range(mask.bit_length()) if mask >> rank & 1
            )
        return (group.stream, f"{label} {group.text}")


def _each(after: Any) -> tuple:
    return after if isinstance(after, tuple) else (after,)
