"""tqdm bars in a launched worker: text on stderr, and the count in the status panel.

Every tqdm bar a worker creates fills the rank's progress column of the status panel while it
runs (its count, total and description, as :func:`notebook_launcher.progress` does); its last
state reaches the cell as a ``[rankN]`` line when it closes. This holds however the worker
started: a forked worker inherits the kernel's ``tqdm.std`` module, a spawned one imports it
afresh, and both are set up when it is imported (or at once).

``from tqdm.auto import tqdm`` in a cell picks ``tqdm.notebook.tqdm_notebook``, whose bar is an
ipywidget. A worker forked from the kernel inherits that choice, but ipykernel drops what a
forked process sends, so its bars would show nothing at all: there the notebook class builds a
plain ``tqdm.std.tqdm`` instead.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from .. import live
from . import hooks
from .bars import NestedBar

_NOTEBOOK_ONLY = ("display",)  # keywords tqdm_notebook takes and the text bar does not


class TqdmProgress(NestedBar):
    """What the status panel reads from a tqdm bar (see :class:`.bars.NestedBar`)."""

    def __init__(self, bar: Any, under: Any = None) -> None:
        super().__init__(under)
        self.bar = bar
        self._started = time.monotonic()
        self._ended: float | None = None

    @property
    def own_closed(self) -> bool:
        return bool(self.bar.disable)  # tqdm disables a bar when it closes

    def own_snapshot(self) -> tuple[str | None, int, int | None, float]:
        bar = self.bar
        if self.own_closed and self._ended is None:
            self._ended = time.monotonic()  # a closed bar's elapsed time stops
        desc = (bar.desc or "").rstrip(": ") or None
        total = None if bar.total is None else int(bar.total)
        end = self._ended if self._ended is not None else time.monotonic()
        return (desc, int(bar.n), total, end - self._started)


def show_in_panel(module: Any) -> None:
    """Make every bar of ``module.tqdm`` (``tqdm.std``, and its subclasses) show in the panel."""

    def __init__(wrapped: Any, bar: Any, args: Any, kwargs: Any) -> None:
        wrapped(*args, **kwargs)
        if getattr(bar, "disable", True):
            return
        shown = live.shown_progress()
        if isinstance(shown, live.Progress) and not shown.closed:
            return  # an explicit notebook_launcher.progress (or an adapter's) keeps the column
        live.show_progress(TqdmProgress(bar, shown))

    hooks.wrap_method(module.tqdm, "__init__", __init__)


def text_bars(module: Any) -> None:
    """Make ``module.tqdm_notebook`` (``tqdm.notebook``) build text bars instead of widgets."""
    std = sys.modules["tqdm.std"]  # tqdm.notebook's own base

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        for name in _NOTEBOOK_ONLY:
            kwargs.pop(name, None)
        # Not a cls instance, so Python calls no __init__ on it; std.tqdm's own __init__ shows it.
        return std.tqdm(*args, **kwargs)

    hooks.replace(module.tqdm_notebook, "__new__", __new__)
