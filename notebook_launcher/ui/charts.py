"""Metric charts as SVG: one chart per metric, a thin line per rank and a thick mean.

Above :data:`.folding.FOLD_ABOVE` ranks (or the ``NOTEBOOK_LAUNCHER_RANK_LINES`` environment
variable's number) a chart draws the mean and the min-max band only; ``every_rank`` draws a line
per rank whatever their number.

SVG needs no plotting library. Live, each chart is inline SVG in a widget's HTML (it follows the
notebook's theme). In the static copy a run leaves in its cell each chart is a standalone SVG
image, given twice: as an ``<img>`` (viewers that strip styles, such as GitHub's) over the same
image as the background of its box (JupyterLab's sanitizer, applied to notebooks it does not
trust, drops both inline SVG and ``data:`` images, but keeps CSS backgrounds).
"""

from __future__ import annotations

import base64
import html
import math

from .folding import rank_lines_up_to
from .model import RunModel
from .series import MetricSeries

WIDTH, HEIGHT = 340, 170
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 20, 18  # margins around the plot area
MAX_DRAWN = 300  # points drawn per line (the plot is about that many pixels wide)
STATIC_DRAWN = 100  # ... in a static copy, which is saved with the notebook twice per chart
INK = "#222"  # text and the mean line of a standalone chart, drawn on white
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


def metrics_html(model: RunModel, static: bool = False, every_rank: bool = False) -> str:
    """Every metric's chart side by side, with a legend; "" when nothing was logged.

    ``static``: standalone SVG images (for the copy kept in the cell) instead of inline SVG.
    ``every_rank``: a line per rank however many ranks there are.
    """
    up_to = model.num_processes if every_rank else rank_lines_up_to()
    with model.lock:
        names = sorted(model.metrics)
        if static:
            charts = [chart_image(model.metrics[name], up_to) for name in names]
        else:
            charts = [chart_svg(model.metrics[name], up_to) for name in names]
        ranks = sorted({rank for name in names for rank in model.metrics[name].per_rank})
    if not charts:
        return ""
    legend = []
    if len(ranks) <= up_to:
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


def chart_svg(series: MetricSeries, rank_lines: int, standalone: bool = False) -> str:
    """One metric's chart: the per-rank lines (up to ``rank_lines`` ranks), the min-max band
    and the mean line.

    ``standalone``: an SVG document of its own (an image), dark on white, instead of inline SVG
    in the notebook's colours.
    """
    limit = STATIC_DRAWN if standalone else MAX_DRAWN
    per_rank = {rank: thin(s.points(), limit) for rank, s in sorted(series.per_rank.items())}
    draw_ranks = len(per_rank) <= rank_lines  # else the mean and the band only
    drawn_ranks = per_rank if draw_ranks else {}
    mean, low, high = (
        thin(series.mean.points(), limit),
        thin(series.low.points(), limit),
        thin(series.high.points(), limit),
    )
    drawn = [*mean, *low, *high, *(p for points in drawn_ranks.values() for p in points)]
    finite = [(x, y) for x, y in drawn if math.isfinite(x) and math.isfinite(y)]
    name = html.escape(series.name)
    last = series.last_mean()
    title = name if last is None else f"{name} · mean {last:.4g}"
    size = f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"'
    if standalone:
        box = (
            f'<svg xmlns="http://www.w3.org/2000/svg" {size} color="{INK}" '
            'font-family="sans-serif" font-size="10">'
            f'<rect width="{WIDTH}" height="{HEIGHT}" rx="3" fill="#fff"/>'
        )
    else:
        box = (
            f'<svg class="nl-chart" data-metric="{name}" data-points="{len(series.mean)}" '
            f'data-logged="{series.logged}" xmlns="http://www.w3.org/2000/svg" {size} '
            'style="display:inline-block;margin:0 8px 4px 0;color:var(--jp-ui-font-color1,#222);'
            'font-family:sans-serif;font-size:10px">'
        )
    box += f'<text x="{LEFT}" y="12" fill="currentColor" font-weight="600">{title}</text>'
    if not finite:
        return box + "</svg>"
    scale = _Scale(finite)
    parts = [box, scale.frame()]
    if len(per_rank) > 1 and high:
        parts.append(_band(scale, low, high))
    if draw_ranks:
        for rank, points in per_rank.items():
            parts.append(_line(scale, points, rank_colour(rank), 1.0, 0.75))
    parts.append(_line(scale, mean, "currentColor", 2.0, 1.0))
    parts.append("</svg>")
    return "".join(parts)


def chart_image(series: MetricSeries, rank_lines: int) -> str:
    """One metric's chart as a standalone SVG image, shown by viewers that strip inline SVG."""
    svg = chart_svg(series, rank_lines, standalone=True)
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    name = html.escape(series.name)
    return (
        f'<span class="nl-chart-box" title="{name}" style="display:inline-block;width:{WIDTH}px;'
        f"height:{HEIGHT}px;margin:0 8px 4px 0;vertical-align:top;"
        f"background-image:url('{uri}');background-repeat:no-repeat\">"
        f'<img class="nl-chart" data-metric="{name}" data-points="{len(series.mean)}" '
        f'data-logged="{series.logged}" src="{uri}" alt="" width="{WIDTH}" height="{HEIGHT}" '
        'style="display:block"></span>'
    )


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
    finite = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if not finite:
        return ""
    if len(finite) == 1:  # a line through one point draws nothing: mark the point itself
        (x, y), radius = finite[0], width + 1.5
        return (
            f'<circle cx="{scale.x(x):.1f}" cy="{scale.y(y):.1f}" r="{radius:g}" '
            f'fill="{colour}" fill-opacity="{opacity}"/>'
        )
    return (
        f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" '
        f'stroke-opacity="{opacity}" stroke-linejoin="round" points="{_coords(scale, points)}"/>'
    )


def _band(scale: _Scale, low: list, high: list) -> str:
    outline = _coords(scale, high) + " " + _coords(scale, list(reversed(low)))
    return f'<polygon fill="currentColor" fill-opacity="0.12" stroke="none" points="{outline}"/>'
