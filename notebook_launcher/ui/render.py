"""Drawing a :class:`RunModel` as text: the status table in HTML and in plain text.

Pure functions of the model and a time; every text that came from a worker is escaped. Text cut
to fit a row ends with an ellipsis at a word boundary, the whole text in the ``title`` (shown on
hover).
"""

from __future__ import annotations

import html

from ..protocol.status import RankStatus
from .folding import BarSummary, Row, bar_summaries, fold_rows
from .model import ACTIVE, RankState, RunModel
from .texts import ago, clip, clipped_html, fraction, memory, number

__all__ = ["ago", "clip", "clipped_html", "memory", "number", "status_html", "status_text"]

COLOURS = {
    RankStatus.STARTING: "#8c8c8c",
    RankStatus.RUNNING: "#1f77b4",
    RankStatus.FINISHED: "#2ca02c",
    RankStatus.FAILED: "#d62728",
    RankStatus.STOPPED: "#6b7280",  # neutral: stopping is not an error (a blamed rank's row says so)
}
PROMPT_COLOUR = "#b8860b"  # a rank at a prompt: neither stalled nor failed, waiting for the user
ERROR = "#d62728"
BLAMED_ROW = "background:rgba(214,39,40,0.14)"
BAR_WIDTH = 110  # pixels of a progress bar
TEXT_BAR = 20  # characters of a progress bar in plain text
CELL = "padding:1px 8px;text-align:left;white-space:nowrap"
LINE_CHARS = 60  # characters of a rank's latest output line shown in its row
ERROR_CHARS = 160
STATUS_CHARS = 60
SUMMARY_CHARS = 120  # characters of a failed rank's error in the one-line summary


def counts_text(model: RunModel) -> str:
    """'1 failed, 1 stopped', or '2 stopped (stop requested)' when every stopped rank says why."""
    with model.lock:
        counts = ", ".join(f"{n} {name}" for name, n in model.counts().items())
        reasons = {state.stop_reason for state in model.ranks if state.state == RankStatus.STOPPED}
        failed = any(state.state == RankStatus.FAILED for state in model.ranks)
    if len(reasons) == 1 and not failed:
        reason = reasons.pop()
        if reason:
            counts += f" ({reason})"
    return counts


def headline(model: RunModel, now: float) -> str:
    """'4 ranks · 2 running, 1 finished, 1 failed · 12 s' (plain text)."""
    plural = "rank" if model.num_processes == 1 else "ranks"
    return f"{model.num_processes} {plural} · {counts_text(model)} · {model.elapsed(now):.0f} s"


def blamed_ranks(model: RunModel) -> list[RankState]:
    with model.lock:
        return [state for state in model.ranks if state.blamed]


def summary_line(model: RunModel) -> str:
    """One deterministic line about a run (no timings): what nbval compares, what text shows.

    'notebook_launcher: 2 ranks: 2 finished; metrics: loss', 'notebook_launcher: 2 ranks; rank 1
    failed: ValueError: bad lr' (whether the others were stopped first or failed on losing it
    varies from run to run, so a failure is told by its cause alone).
    """
    plural = "rank" if model.num_processes == 1 else "ranks"
    line = f"notebook_launcher: {model.num_processes} {plural}"
    blamed = blamed_ranks(model)
    causes = [state for state in blamed if state.error]
    if causes:
        for state in causes:
            line += f"; rank {state.rank} failed: {clip(state.error, SUMMARY_CHARS)}"
    else:
        line += f": {counts_text(model)}"
        for state in blamed:
            line += f"; likely cause: rank {state.rank}"
    names = sorted(model.metrics)
    if names:
        line += "; metrics: " + ", ".join(names)
    return line


# -- HTML -------------------------------------------------------------------------------------------


def _badge(text: str, state: str, colour: str | None = None) -> str:
    return (
        f'<span class="nl-state" style="background:{colour or COLOURS[state]};color:#fff;'
        "border-radius:3px;"
        f'padding:0 6px">{text}</span>'
    )


def _title_html(model: RunModel, now: float) -> str:
    return (
        f'<div class="nl-headline" style="margin:2px 0 4px 0"><b>notebook_launcher</b> · '
        f"{html.escape(headline(model, now))}</div>{_job_html(model)}"
    )


def _job_html(model: RunModel) -> str:
    """The cluster job's line: queued (state, reason, expected start) or its time left, in the
    warning colour once near its limit."""
    job = model.job
    if job is None:
        return ""
    near = job.near_limit()
    colour = "#b8860b" if near or job.pending else "inherit"
    return (
        f'<div class="nl-job" data-state="{html.escape(job.state.lower())}" '
        f'data-near-limit="{str(near).lower()}" style="margin:0 0 4px 0;color:{colour}">'
        f"{html.escape(job.text())}{' — near its time limit' if near else ''}</div>"
    )


def status_html(model: RunModel, now: float, every_rank: bool = False, heading: bool = True) -> str:
    """The whole rank table as one HTML fragment (one widget value).

    Above :data:`.folding.FOLD_ABOVE` ranks, alike rows are folded into one (see
    :func:`.folding.fold_rows`) unless ``every_rank``; a progress bar several ranks show is
    summed up above the table (its slowest and fastest rank). ``heading``: the headline and
    the bars above the table (False: the table alone).
    """
    with model.lock:
        show_memory = any(state.memory is not None for state in model.ranks)
        show_node = any(state.node for state in model.ranks)
        folded = fold_rows(model.ranks, up_to=len(model.ranks) if every_rank else None)
        rows = [_row(row, now, show_memory, show_node) for row in folded]
        bars = bars_html(bar_summaries(model.ranks)) if heading else ""
        title = _title_html(model, now) if heading else ""
        outcome = model.outcome
    heads = ["rank", *(["node"] if show_node else []), "state", "progress", "step", "it/s"]
    heads.append("last seen")
    if show_memory:
        heads.append("memory")
    heads.append("details")
    head = "".join(f'<th style="{CELL};font-weight:600">{h}</th>' for h in heads)
    return (
        f'<div class="nl-status" data-outcome="{outcome}" data-rows="{len(rows)}" '
        f'style="font-size:12px">{title}{bars}'
        '<table style="border-collapse:collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def bar_text(bar: BarSummary) -> str:
    """'epoch 2: slowest rank 3 16/40 · fastest rank 0 31/40' or 'epoch 2: 40/40 on 4 ranks'."""
    slow, fast = bar.slowest, bar.fastest
    total = "" if bar.total is None else f"/{bar.total}"
    if slow.done == fast.done:
        counts = f"{slow.done}{total} on {bar.count} ranks"
    else:
        counts = (
            f"slowest rank {slow.rank} {slow.done}{total} · fastest rank {fast.rank} "
            f"{fast.done}{total}"
        )
    return f"{bar.desc}: {counts}" if bar.desc else counts


def bars_html(bars: list[BarSummary]) -> str:
    """A bar per loop several ranks run: filled dark up to the slowest rank, light up to the
    fastest, with both ranks' counts."""
    shown = [bar for bar in bars if bar.count > 1]
    if not shown:
        return ""
    lines = []
    for bar in shown:
        slow, fast = bar.slowest, bar.fastest
        low, high = fraction(slow), fraction(fast)
        counts = bar_text(bar).removeprefix(f"{bar.desc}: ")
        percent = f"{low * 100:.0f}% " if low is not None else ""
        track = ""
        if low is not None and high is not None:
            colour = COLOURS[RankStatus.RUNNING]
            track = (
                f'<span style="display:inline-block;position:relative;width:{2 * BAR_WIDTH}px;'
                "height:10px;background:rgba(128,128,128,0.25);border-radius:2px;"
                'vertical-align:middle;margin-right:6px">'
                f'<span style="position:absolute;left:0;top:0;width:{high * 100:.1f}%;'
                f'height:100%;background:{colour};opacity:0.35;border-radius:2px"></span>'
                f'<span style="position:absolute;left:0;top:0;width:{low * 100:.1f}%;'
                f'height:100%;background:{colour};border-radius:2px"></span></span>'
            )
        desc = f"<b>{clipped_html(bar.desc, STATUS_CHARS)}</b> " if bar.desc else ""
        lines.append(
            f'<div class="nl-bar" data-desc="{html.escape(bar.desc)}" '
            f'data-low="{slow.done}" data-high="{fast.done}" style="margin:1px 0">'
            f"{track}{desc}{percent}{html.escape(counts)}</div>"
        )
    return f'<div class="nl-bars" style="margin:2px 0 4px 0">{"".join(lines)}</div>'


def compact_html(model: RunModel, now: float) -> str:
    """A run that logged nothing, in one line: its ranks' states and what went wrong, if anything.

    Each rank is a small badge (its number, coloured by state, the state on hover).
    """
    with model.lock:
        outcome = model.outcome
        badges = "".join(
            f'<span class="nl-rank" data-rank="{s.rank}" data-state="{s.state}" '
            f'title="rank {s.rank}: {s.state}" style="display:inline-block;min-width:1.4em;'
            f"text-align:center;margin-right:2px;border-radius:3px;color:#fff;"
            f'background:{COLOURS[s.state]}{";outline:2px solid " + ERROR if s.blamed else ""}">'
            f"{s.rank}</span>"
            for s in model.ranks
        )
        causes = [_cause_html(state) for state in model.ranks if state.blamed]
    parts = [
        "<b>notebook_launcher</b>",
        html.escape(headline(model, now)),
        f'<span class="nl-ranks">{badges}</span>',
        *causes,
    ]
    return (
        f'<div class="nl-status nl-compact" data-outcome="{outcome}" '
        f'style="font-size:12px;margin:2px 0">{" · ".join(parts)}</div>{_job_html(model)}'
    )


def _cause_html(state: RankState) -> str:
    text = (
        f"rank {state.rank}: {state.error}" if state.error else f"rank {state.rank}: likely cause"
    )
    return (
        f'<span class="nl-error" style="color:{ERROR};font-weight:600">'
        f"{clipped_html(text, ERROR_CHARS)}</span>"
    )


def _row(row: Row, now: float, show_memory: bool, show_node: bool = False) -> str:
    state = row.first
    many = len(row.ranks) > 1
    alive = [s.last_alive for s in row.ranks if s.last_alive]
    seen = ago(now - min(alive)) if state.state in ACTIVE and alive else ""
    step = number(state.step if state.step is not None else state.done)
    if many and row.low != row.high:
        step = f"{number(row.low)}–{number(row.high)}"
    rates = sorted(s.rate for s in row.ranks if s.rate is not None)
    rate = rates[len(rates) // 2] if rates and state.state in ACTIVE else None  # the median
    shown = state.notice if state.at_prompt and state.state in ACTIVE else state.state
    badge = f"{len(row.ranks)} {shown}" if many else shown
    colour = PROMPT_COLOUR if shown != state.state else None
    cells = [
        row.label,
        *([clipped_html(state.node, STATUS_CHARS)] if show_node else []),
        _badge(badge, state.state, colour),
        _bar_html(state),
        step,
        number(rate),
        seen,
    ]
    if show_memory:
        cells.append(memory(state.memory))
    cells.append(_details_html(state))
    tds = "".join(f'<td style="{CELL}">{cell}</td>' for cell in cells)
    blamed = " nl-blamed" if state.blamed else ""
    style = BLAMED_ROW if state.blamed else ""
    ranks = " ".join(str(s.rank) for s in row.ranks)
    return (
        f'<tr class="nl-row nl-{state.state}{blamed}" data-rank="{ranks}" '
        f'data-state="{state.state}" style="{style}">{tds}</tr>'
    )


def _bar_html(state: RankState) -> str:
    part = fraction(state)
    if state.done is None:
        return ""
    label = f"{state.done}/{state.total}" if state.total is not None else f"{state.done}"
    if state.desc:
        label = f"{clipped_html(state.desc, STATUS_CHARS)} {label}"
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
            f'<span class="nl-error" style="color:{ERROR};font-weight:600">'
            f"{clipped_html(state.error, ERROR_CHARS)}</span>"
        )
    elif state.state == RankStatus.STOPPED and state.blamed:
        reason = f"likely cause · stopped: {state.stop_reason}"
        parts.append(
            f'<span class="nl-error" style="color:{ERROR};font-weight:600">'
            f"{clipped_html(reason, ERROR_CHARS)}</span>"
        )
    elif state.state == RankStatus.STOPPED and state.stop_reason:
        parts.append(f"<i>stopped: {clipped_html(state.stop_reason, STATUS_CHARS)}</i>")
    if state.notice and state.state in ACTIVE and not state.at_prompt:  # the badge says it
        parts.append(
            f'<span class="nl-notice" style="color:#b8860b">{clipped_html(state.notice, STATUS_CHARS)}</span>'
        )
    if state.status:
        parts.append(f"<i>{clipped_html(state.status, STATUS_CHARS)}</i>")
    if state.last_line:
        parts.append(
            '<code style="opacity:0.75;white-space:pre">'
            f"{clipped_html(state.last_line, LINE_CHARS)}</code>"
        )
    return " · ".join(parts)


# -- plain text -----------------------------------------------------------------------------------


def status_text(model: RunModel, now: float) -> str:
    """The rank table as plain text lines, for terminals, scripts and CI logs (alike ranks
    folded into one line above :data:`.folding.FOLD_ABOVE` ranks)."""
    with model.lock:
        lines = [f"notebook_launcher: {headline(model, now)}"]
        if model.job is not None:
            lines.append(f"  {model.job.text()}")
        lines += [f"  {bar_text(bar)}" for bar in bar_summaries(model.ranks) if bar.count > 1]
        for row in fold_rows(model.ranks):
            line = _text_row(row.first)
            if len(row.ranks) > 1:
                line = line.replace(f"rank {row.first.rank:<3}", f"ranks {row.label}", 1)
            lines.append(line)
        for series in sorted(model.metrics.values(), key=lambda s: s.name):
            mean = series.last_mean()
            if mean is not None:
                step = number(series.mean.last[0]) if series.mean.last else ""
                lines.append(f"  {series.name}: mean {mean:.4g} at step {step}")
    return "\n".join(lines)


def _text_row(state: RankState) -> str:
    parts = [f"  rank {state.rank:<3} {state.state:<9}"]
    if state.node:
        parts.append(f"on {state.node}")
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
    elif state.state == RankStatus.STOPPED and state.stop_reason:
        parts.append(f"stopped: {state.stop_reason}")
    if state.blamed and not state.error:
        parts.append("(likely cause)")
    if state.notice and state.state in ACTIVE:
        parts.append(state.notice)
    if state.status:
        parts.append(state.status)
    return "  ".join(parts).rstrip()
