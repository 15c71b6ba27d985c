"""Metric charts as inline SVG: one chart per metric, a thin line per rank and a thick mean.

SVG inside an HTML fragment needs no plotting library, updates in a widget while a cell runs and
is also what a saved or exported notebook shows.
"""

from __future__ import annotations

import html
import math

from .model import RunModel
from .series import MetricSeries

WIDTH, HEIGHT = 340, 170
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 20, 18  # margins around the plot area
MAX_DRAWN = 300  # points drawn per line (the plot is about that many pixels wide)
MAX_RANK_LINES = 16  # with more ranks only the mean and the min-max band are drawn
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def rank_colour(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


def thin(points: list[tuple[float, float]], limit: int = MAX_DRAWN) -> list[tuple[float, float]]:
    """At most about ``limit`` evenly spaced points, keeping the first and the last."""
    if len(points) <= limit:
        return points
    step = math.ceil(len(points) / limit)
    kept = points[::step]
    if kept[-1] is not points[-1]:
        kept.append(points[-1])
    return kept


def metrics_html(model: RunModel) -> str:
    """Every metric's chart side by side, with a legend; "" when nothing was logged."""
    with model.lock:
        names = sorted(model.metrics)
        charts = [chart_svg(model.metrics[name], model.world_size) for name in names]
        ranks = sorted({rank for name in names for rank in model.metrics[name].per_rank})
    if not charts:
        return ""
    legend = []
    if len(ranks) <= MAX_RANK_LINES:
        legend += [
            f'<span style="color:{rank_colour(r)}">&#9632;</span>&nbsp;rank&nbsp;{r}' for r in ranks
        ]
    legend.append("<b>&#9644;</b>&nbsp;mean")
    if len(ranks) > 1:
        legend.append('<span style="opacity:0.3">&#9632;</span>&nbsp;min–max')
    return (
        '<div class="nl-metrics" style="font-size:11px">'
        f"<div>{''.join(charts)}</div>"
        f'<div class="nl-legend" style="margin:2px 0 0 4px">{" &nbsp; ".join(legend)}</div>'
        "</div>"
    )


def chart_svg(series: MetricSeries, world_size: int) -> str:
    """One metric's chart: the per-rank lines, the min-max band and the mean line."""
    per_rank = {rank: thin(s.points()) for rank, s in sorted(series.per_rank.items())}
    mean, low, high = (
        thin(series.mean.points()),
        thin(series.low.points()),
        thin(series.high.points()),
    )
    drawn = [*mean, *(p for points in per_rank.values() for p in points)]
    finite = [(x, y) for x, y in drawn if math.isfinite(x) and math.isfinite(y)]
    name = html.escape(series.name)
    last = series.last_mean()
    title = name if last is None else f"{name} · mean {last:.4g}"
    box = (
        f'<svg class="nl-chart" data-metric="{name}" data-points="{len(series.mean)}" '
        f'data-logged="{series.logged}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'style="display:inline-block;margin:0 8px 4px 0;color:var(--jp-ui-font-color1,#222);'
        'font-family:sans-serif;font-size:10px">'
        f'<text x="{LEFT}" y="12" fill="currentColor" font-weight="600">{title}</text>'
    )
    if not finite:
        return box + "</svg>"
    scale = _Scale(finite)
    parts = [box, scale.frame()]
    if len(per_rank) > 1 and high:
        parts.append(_band(scale, low, high))
    if len(per_rank) <= MAX_RANK_LINES:
        for rank, points in per_rank.items():
            parts.append(_line(scale, points, rank_colour(rank), 1.0, 0.75))
    parts.append(_line(scale, mean, "currentColor", 2.0, 1.0))
    parts.append("</svg>")
    return "".join(parts)


class _Scale:
    """Maps data coordinates onto the plot area."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        xs = [x for x, _ in points]
        ys = [y for _, y in points]
        self.x0, self.x1 = min(xs), max(xs)
        self.y0, self.y1 = min(ys), max(ys)
        if self.x1 == self.x0:
            self.x0, self.x1 = self.x0 - 1, self.x1 + 1
        if self.y1 == self.y0:
            pad = abs(self.y0) * 0.1 or 1.0
            self.y0, self.y1 = self.y0 - pad, self.y1 + pad
        self.w = WIDTH - LEFT - RIGHT
        self.h = HEIGHT - TOP - BOTTOM

    def x(self, value: float) -> float:
        return LEFT + (value - self.x0) / (self.x1 - self.x0) * self.w

    def y(self, value: float) -> float:
        return TOP + (self.y1 - value) / (self.y1 - self.y0) * self.h

    def frame(self) -> str:
        bottom, right = TOP + self.h, LEFT + self.w
        return (
            f'<rect x="{LEFT}" y="{TOP}" width="{self.w}" height="{self.h}" fill="none" '
            'stroke="currentColor" stroke-opacity="0.3"/>'
            f'<text x="{LEFT - 3}" y="{TOP + 8}" text-anchor="end" fill="currentColor">'
            f"{_tick(self.y1)}</text>"
            f'<text x="{LEFT - 3}" y="{bottom}" text-anchor="end" fill="currentColor">'
            f"{_tick(self.y0)}</text>"
            f'<text x="{LEFT}" y="{bottom + 12}" fill="currentColor">{_tick(self.x0)}</text>'
            f'<text x="{right}" y="{bottom + 12}" text-anchor="end" fill="currentColor">'
            f"step {_tick(self.x1)}</text>"
        )


def _tick(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.3g}"


def _coords(scale: _Scale, points: list[tuple[float, float]]) -> str:
    return " ".join(
        f"{scale.x(x):.1f},{scale.y(y):.1f}"
        for x, y in points
        if math.isfinite(x) and math.isfinite(y)
    )


def _line(scale: _Scale, points: list, colour: str, width: float, opacity: float) -> str:
    if not points:
        return ""
    return (
        f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" '
        f'stroke-opacity="{opacity}" stroke-linejoin="round" points="{_coords(scale, points)}"/>'
    )


def _band(scale: _Scale, low: list, high: list) -> str:
    outline = _coords(scale, high) + " " + _coords(scale, list(reversed(low)))
    return f'<polygon fill="currentColor" fill-opacity="0.12" stroke="none" points="{outline}"/>'
