"""tqdm's notebook bars in a launched worker: text on stderr, and the count in the status panel.

``from tqdm.auto import tqdm`` in a cell picks ``tqdm.notebook.tqdm_notebook``, whose bar is an
ipywidget. A worker forked from the kernel inherits that choice, but ipykernel drops what a
forked process sends, so its bars show nothing at all. In a worker the notebook class builds a
plain ``tqdm.std.tqdm`` instead: its last state reaches the cell as a ``[rankN]`` line when the
bar closes, and while it runs its count, total and description fill the rank's progress column
of the status panel (as :func:`notebook_launcher.progress` does).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..worker import live
from . import hooks

_NOTEBOOK_ONLY = ("display",)  # keywords tqdm_notebook takes and the text bar does not


class TqdmProgress:
    """What the status panel reads from a tqdm bar (the interface of ``live.Progress``)."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self._started = time.monotonic()

    @property
    def closed(self) -> bool:
        return bool(self.bar.disable)  # tqdm disables a bar when it closes

    def snapshot(self) -> tuple[str | None, int, int | None, float]:
        bar = self.bar
        desc = (bar.desc or "").rstrip(": ") or None
        total = None if bar.total is None else int(bar.total)
        return (desc, int(bar.n), total, time.monotonic() - self._started)


def text_bars(module: Any) -> None:
    """Make ``module.tqdm_notebook`` (``tqdm.notebook``) build text bars shown in the panel."""
    std = sys.modules["tqdm.std"]  # tqdm.notebook's own base
    notebook_class = module.tqdm_notebook

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        for name in _NOTEBOOK_ONLY:
            kwargs.pop(name, None)
        bar = std.tqdm(*args, **kwargs)  # not a cls instance: Python calls no __init__ on it
        if not bar.disable:
            live.show_progress(TqdmProgress(bar))
        return bar

    hooks.replace(notebook_class, "__new__", __new__)
