"""Live views of a launch: a pure model of its events, and views that draw it.

``ui="widgets"`` shows a status table and metric charts in the notebook (a static copy of the
final state stays in the cell), ``"console"`` prints plain-text status, ``"none"`` only keeps the
model; ``"auto"`` picks widgets inside a Jupyter kernel and the console elsewhere. Nothing here
imports ipywidgets until widgets are used.
"""

from __future__ import annotations

import sys

from .model import RankState, RunModel
from .report import RunPanel
from .series import MetricSeries, Series
from .views import ConsoleView, View

UI_CHOICES = ("auto", "widgets", "console", "none")
BACKGROUND_LOG_LINES = 20  # worker lines kept under a background run's panel

__all__ = [
    "UI_CHOICES",
    "ConsoleView",
    "MetricSeries",
    "RankState",
    "RunModel",
    "RunPanel",
    "Series",
    "View",
    "check_ui",
    "create_view",
    "in_kernel",
    "resolve_ui",
]


def check_ui(ui: object) -> str:
    """Raise ValueError unless ``ui`` is one of "auto", "widgets", "console", "none"."""
    if not isinstance(ui, str) or ui not in UI_CHOICES:
        raise ValueError(
            f"ui={ui!r} is not valid: allowed values are " + ", ".join(map(repr, UI_CHOICES))
        )
    return ui


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (whose frontend can show widgets)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return getattr(shell, "kernel", None) is not None


def resolve_ui(ui: str) -> str:
    """The view ``ui`` stands for here: "widgets", "console" or "none"."""
    check_ui(ui)
    if ui != "auto":
        return ui
    if not in_kernel():
        return "console"
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "console"
    return "widgets"


def create_view(
    ui: str,
    world_size: int,
    output: str = "all",
    *,
    first_rank: int = 0,
    background: bool = False,
    show: bool = True,
) -> View:
    """The view of a launch of ``world_size`` ranks.

    Args:
        ui: "auto", "widgets", "console" or "none".
        world_size: number of ranks (of this node).
        output: the launch's output policy; hidden ranks' lines are not shown in the table.
        first_rank: the global rank of this node's first process.
        background: the run is supervised from a background thread: widgets then also keep the
            last worker lines under the table (a background run's output has no cell to go to),
            and the final panel takes the widgets' place in the cell when the run ends.
        show: display the widgets in the current cell now.
    """
    kind = resolve_ui(ui)
    model = RunModel(world_size, output=output, first_rank=first_rank)
    if kind == "widgets":
        from .widgets import WidgetView

        lines = BACKGROUND_LOG_LINES if background else 0
        view: View = WidgetView(model, log_lines=lines, in_place=background)
        if show:
            view.show()
        return view
    if kind == "console":
        return ConsoleView(model)
    return View(model)
