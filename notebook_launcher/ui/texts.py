"""The small texts a status row is made of: times ago, numbers, memory, clipped text."""

from __future__ import annotations

import html

from .model import RankState


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


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary where one is near."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip() + "…"


def clipped_html(text: str, limit: int) -> str:
    """Escaped ``text``, cut with an ellipsis; when cut, wrapped in a span titled with all of it."""
    shown = clip(text, limit)
    if shown == text:
        return html.escape(text)
    return f'<span title="{html.escape(text)}">{html.escape(shown)}</span>'
