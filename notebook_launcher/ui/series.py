"""Metric series: one line per rank thinned to a fixed number of points, and across ranks the
mean, minimum and maximum at each step."""

from __future__ import annotations

import heapq
import math

MAX_POINTS = 500  # points kept per series (plus the latest one)
CLOSE_AFTER = 2.0  # seconds after which a step's across-rank values are final anyway


class Series:
    """One line of a chart, thinned evenly to at most ``cap`` points plus the latest one.

    When the series outgrows ``cap`` every other kept point is dropped and only every
    ``stride``-th new value is kept from then on; the first value and the latest one always stay.
    """

    __slots__ = ("cap", "count", "stride", "xs", "ys", "last")

    def __init__(self, cap: int = MAX_POINTS) -> None:
        self.cap = cap
        self.count = 0  # values added, kept or not
        self.stride = 1
        self.xs: list[float] = []
        self.ys: list[float] = []
        self.last: tuple[float, float] | None = None

    def add(self, x: float, y: float) -> None:
        if self.count % self.stride == 0:
            self.xs.append(x)
            self.ys.append(y)
            if len(self.xs) > self.cap:
                self.xs = self.xs[::2]
                self.ys = self.ys[::2]
                self.stride *= 2
        self.count += 1
        self.last = (x, y)

    def points(self) -> list[tuple[float, float]]:
        """The kept points in order, ending with the latest value added."""
        points = list(zip(self.xs, self.ys, strict=True))
        if self.last is not None and (self.count - 1) % self.stride != 0:
            points.append(self.last)
        return points

    def __len__(self) -> int:
        return len(self.xs) + (1 if self.last is not None and (self.count - 1) % self.stride else 0)


class MetricSeries:
    """Everything logged under one metric name: a series per rank, and across ranks the mean,
    minimum and maximum at each step.

    A step's across-rank values are final once every rank still running has logged this metric
    at that step or a later one, or ``grace`` seconds after its first value (for metrics only
    some ranks log); values arriving later are kept per rank only. :meth:`close` finalises the
    rest at the end of the run.
    """

    def __init__(
        self,
        name: str,
        num_processes: int = 1,
        cap: int = MAX_POINTS,
        grace: float = CLOSE_AFTER,
        first_rank: int = 0,
    ) -> None:
        self.name = name
        self.cap = cap
        self.grace = grace
        # the ranks whose values each step waits for
        self._expected = set(range(first_rank, first_rank + num_processes))
        self.per_rank: dict[int, Series] = {}
        self.mean = Series(cap)
        self.low = Series(cap)
        self.high = Series(cap)
        self.logged = 0  # values received, over all ranks
        self._next_index: dict[int, int] = {}  # for values logged without a step
        self._latest: dict[int, float] = {}
        self._open: dict[float, list[float]] = {}  # step -> [sum, count, min, max, opened]
        self._heap: list[float] = []
        self._closed_upto = -math.inf

    def add(
        self, rank: int, step: float | None, value: float, now: float = 0.0, advance: bool = True
    ) -> float:
        """Record one value (``now``: the model's time); returns the step it was filed under.

        ``advance=False`` leaves finalising steps to one :meth:`advance` call after a batch.
        """
        if step is None:
            step = self._next_index.get(rank, 0)
            self._next_index[rank] = step + 1
        series = self.per_rank.get(rank)
        if series is None:
            series = self.per_rank[rank] = Series(self.cap)
        series.add(step, value)
        self.logged += 1
        if step > self._closed_upto and math.isfinite(value):
            acc = self._open.get(step)
            if acc is None:
                self._open[step] = [value, 1.0, value, value, now]
                heapq.heappush(self._heap, step)
            else:
                acc[0] += value
                acc[1] += 1
                acc[2] = min(acc[2], value)
                acc[3] = max(acc[3], value)
        self._latest[rank] = step
        if advance:
            self.advance(now)
        return step

    def retire(self, rank: int, now: float = 0.0) -> None:
        """``rank`` ended: steps no longer wait for it."""
        self._expected.discard(rank)
        self.advance(now)

    def advance(self, now: float) -> None:
        """Finalise the steps every expected rank has passed, and those open too long."""
        heap = self._heap
        if not heap:
            return
        latest = self._latest
        upto = min((latest.get(r, -math.inf) for r in self._expected), default=math.inf)
        too_old = now - self.grace
        while heap and (heap[0] <= upto or self._open[heap[0]][4] <= too_old):
            step = heapq.heappop(heap)
            total, n, low, high, _ = self._open.pop(step)
            self.mean.add(step, total / n)
            self.low.add(step, low)
            self.high.add(step, high)
            self._closed_upto = max(self._closed_upto, step)

    def close(self) -> None:
        """Finalise every step still waiting for slower ranks (the run is over)."""
        self._expected.clear()
        self.advance(math.inf)

    def last_mean(self) -> float | None:
        return None if self.mean.last is None else self.mean.last[1]
