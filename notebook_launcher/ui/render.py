"""Drawing a :class:`RunModel` as text: the status table in HTML and in plain text.

Pure functions of the model and a time; every text that came from a worker is escaped.
"""

from __future__ import annotations

import html

from .model import ACTIVE, RankState, RunModel

COLOURS = {
    "starting": "#8c8c8c",
    "running": "#1f77b4",
    "finished": "#2ca02c",
    "failed": "#d62728",
    "stopped": "#7f6a4d",
}
FAILED_ROW = "background:rgba(214,39,40,0.14)"
BAR_WIDTH = 110  # pixels of a progress bar
TEXT_BAR = 20  # characters of a progress bar in plain text
CELL = "padding:1px 8px;text-align:left;white-space:nowrap"


def ago(seconds: float | None) -> str:
    """How long ago, in coarse steps so that a quiet rank's row does not change every redraw."""
    if seconds is None:
        return ""
    if seconds < 1:
        return "now"
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    return f"{seconds / 3600:.1f} h"


def number(value: float | None) -> str:
    """A step or a rate: whole numbers plainly, others with 3 significant digits."""
    if value is None:
        return ""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.3g}"


def memory(nbytes: int | None) -> str:
    if nbytes is None:
        return ""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.1f} GiB"
    return f"{nbytes / (1 << 20):.0f} MiB"


def fraction(state: RankState) -> float | None:
    if state.done is None or not state.total:
        return None
    return max(0.0, min(1.0, state.done / state.total))


def headline(model: RunModel, now: float) -> str:
    """'4 ranks · 2 running, 1 finished, 1 failed · 12 s' (plain text)."""
    counts = ", ".join(f"{n} {name}" for name, n in model.counts().items())
    plural = "rank" if model.world_size == 1 else "ranks"
    return f"{model.world_size} {plural} · {counts} · {model.elapsed(now):.0f} s"


def status_html(model: RunModel, now: float) -> str:
    """The whole rank table as one HTML fragment (one widget value)."""
    with model.lock:
        show_memory = any(state.memory is not None for state in model.ranks)
        rows = [_row(state, now, show_memory) for state in model.ranks]
        title = html.escape(headline(model, now))
        outcome = model.outcome
    heads = ["rank", "state", "progress", "step", "it/s", "last seen"]
    if show_memory:
        heads.append("memory")
    heads.append("details")
    head = "".join(f'<th style="{CELL};font-weight:600">{h}</th>' for h in heads)
    return (
        f'<div class="nl-status" data-outcome="{outcome}" style="font-size:12px">'
        f'<div class="nl-headline" style="margin:2px 0 4px 0"><b>notebook_launcher</b> · '
        f"{title}</div>"
        '<table style="border-collapse:collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _row(state: RankState, now: float, show_memory: bool) -> str:
    colour = COLOURS[state.state]
    style = FAILED_ROW if state.state == "failed" else ""
    badge = (
        f'<span class="nl-state" style="background:{colour};color:#fff;border-radius:3px;'
        f'padding:0 6px">{state.state}</span>'
    )
    seen = ago(now - state.last_alive) if state.state in ACTIVE and state.last_alive else ""
    cells = [
        str(state.rank),
        badge,
        _bar_html(state),
        number(state.step if state.step is not None else state.done),
        number(state.rate) if state.state in ACTIVE else "",
        seen,
    ]
    if show_memory:
        cells.append(memory(state.memory))
    cells.append(_details_html(state))
    tds = "".join(f'<td style="{CELL}">{cell}</td>' for cell in cells)
    return (
        f'<tr class="nl-row nl-{state.state}" data-rank="{state.rank}" '
        f'data-state="{state.state}" style="{style}">{tds}</tr>'
    )


def _bar_html(state: RankState) -> str:
    part = fraction(state)
    if state.done is None:
        return ""
    label = f"{state.done}/{state.total}" if state.total is not None else f"{state.done}"
    if state.desc:
        label = f"{html.escape(state.desc)} {label}"
    if part is None:
        return label
    colour = COLOURS[state.state]
    return (
        f'<span style="display:inline-block;width:{BAR_WIDTH}px;height:9px;'
        'background:rgba(128,128,128,0.25);border-radius:2px;vertical-align:middle">'
        f'<span style="display:block;width:{part * 100:.1f}%;height:100%;background:{colour};'
        f'border-radius:2px"></span></span> {label}'
    )


def _details_html(state: RankState) -> str:
    parts = []
    if state.error:
        parts.append(
            f'<span class="nl-error" style="color:#d62728;font-weight:600">'
            f"{html.escape(state.error)}</span>"
        )
    elif state.state == "stopped" and state.stop_reason:
        parts.append(f"<i>stopped: {html.escape(state.stop_reason)}</i>")
    if state.notice and state.state in ACTIVE:
        parts.append(
            f'<span class="nl-notice" style="color:#b8860b">{html.escape(state.notice)}</span>'
        )
    if state.status:
        parts.append(f"<i>{html.escape(state.status)}</i>")
    if state.last_line:
        parts.append(
            '<code style="opacity:0.75;white-space:pre">'
            f"{html.escape(_clip(state.last_line, 120))}</code>"
        )
    return " · ".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- plain text -----------------------------------------------------------------------------------


def status_text(model: RunModel, now: float) -> str:
    """The rank table as plain text lines, for terminals, scripts and CI logs."""
    with model.lock:
        lines = [f"notebook_launcher: {headline(model, now)}"]
        lines += [_text_row(state) for state in model.ranks]
        for series in sorted(model.metrics.values(), key=lambda s: s.name):
            mean = series.last_mean()
            if mean is not None:
                step = number(series.mean.last[0]) if series.mean.last else ""
                lines.append(f"  {series.name}: mean {mean:.4g} at step {step}")
    return "\n".join(lines)


def _text_row(state: RankState) -> str:
    parts = [f"  rank {state.rank:<3} {state.state:<9}"]
    part = fraction(state)
    if part is not None:
        filled = round(part * TEXT_BAR)
        parts.append(f"[{'#' * filled}{'.' * (TEXT_BAR - filled)}] {state.done}/{state.total}")
    elif state.done is not None:
        parts.append(f"{state.done} done")
    if state.step is not None:
        parts.append(f"step {number(state.step)}")
    if state.rate is not None and state.state in ACTIVE:
        parts.append(f"{number(state.rate)} it/s")
    if state.error:
        parts.append(state.error)
    elif state.state == "stopped" and state.stop_reason:
        parts.append(f"stopped: {state.stop_reason}")
    if state.notice and state.state in ACTIVE:
        parts.append(state.notice)
    if state.status:
        parts.append(state.status)
    return "  ".join(parts).rstrip()
