"""What the status panel reads from another library's progress bar: the nesting all adapters share.

An adapter reads one library's bar (tqdm, rich) through the interface of ``live.Progress``:
``closed`` and ``snapshot()``. ``under`` is the bar shown before it: a nested bar (an evaluation
loop inside a training loop) that closes hands the progress column back to it while it runs.
"""

from __future__ import annotations

from typing import Any


class NestedBar:
    """The base of every adapter: subclasses say when their own bar closed and what it shows."""

    def __init__(self, under: Any = None) -> None:
        self.under = under if under is not None and not under.closed else None

    @property
    def own_closed(self) -> bool:
        raise NotImplementedError

    def own_snapshot(self) -> tuple[str | None, int, int | None, float]:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self.own_closed and (self.under is None or self.under.closed)

    def snapshot(self) -> tuple[str | None, int, int | None, float]:
        if self.own_closed and self.under is not None:
            return self.under.snapshot()  # the enclosing bar, running or, at the end, closed
        return self.own_snapshot()
