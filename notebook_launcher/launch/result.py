"""What a launch returns: every rank's return value."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..utils.validation import short_repr


class LaunchResult(Sequence):
    """Every rank's return value, in rank order (tensors already moved to the CPU).

    ``result[0]`` or ``result.main`` is rank 0's value, ``result.values`` the list of all;
    ``result.output(rank=3)`` every line rank 3 printed (the cell shows lines that ranks print
    alike once).

    Example:
        >>> result = notebook_launcher(train, num_processes=2)
        >>> result.main, list(result)
    """

    def __init__(
        self,
        values: list[Any],
        restarts: int,
        duration: float,
        panel: Any = None,
        outputs: dict[int, list[str]] | None = None,
    ) -> None:
        self.values = list(values)
        self._outputs = outputs or {}
        self.restarts = restarts
        self.duration = duration
        self.panel = panel  # the run's final status table and charts (a RunPanel), if kept

    def show(self, every_rank: bool = False) -> None:
        """Show the run's final status table and metric charts again.

        In a notebook as static HTML with SVG images (kept in saved and exported notebooks, as
        the copy the launch left in its cell is), as text elsewhere; displaying
        ``result.panel`` does the same.

        Args:
            every_rank: a table row and a chart line per rank, however many ranks there are
                (by default, above 8 ranks alike rows are folded into one and charts draw the
                mean and the min-max band).

        Raises:
            RuntimeError: the launch kept no panel (``debug_launcher``).
        """
        if self.panel is None:
            raise RuntimeError("this launch kept no panel to show (debug_launcher keeps none)")
        self.panel.show(every_rank=every_rank)

    def output(self, rank: int | None = None) -> str:
        """What ``rank`` printed, stdout and stderr in the order it wrote them, one line each
        (the last 100,000 lines of each rank are kept).

        Args:
            rank: a global rank of the launch; None gives every rank's lines, each labelled.

        Raises:
            ValueError: ``rank`` is not a rank of the launch.
        """
        if rank is None:
            return "".join(
                f"[rank{r}] {line}\n"
                for r, lines in sorted(self._outputs.items())
                for line in lines
            )
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(self):
            raise ValueError(
                f"rank={rank!r} is not a rank of this launch: expected an int from 0 to "
                f"{len(self) - 1}, or None for every rank"
            )
        return "".join(line + "\n" for line in self._outputs.get(rank, ()))

    @property
    def main(self) -> Any:
        """Rank 0's return value."""
        return self.values[0]

    @property
    def returned_nothing(self) -> bool:
        """True when every rank's function returned None."""
        return all(value is None for value in self.values)

    def __getitem__(self, index):
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LaunchResult):
            return self.values == other.values
        return NotImplemented

    def __repr__(self) -> str:
        n = len(self.values)
        if self.returned_nothing:
            return f"LaunchResult({n} processes, each returned None)"
        shown = ", ".join(f"{rank}: {short_repr(v)}" for rank, v in enumerate(self.values))
        return f"LaunchResult({n} processes, by rank: {{{shown}}})"
