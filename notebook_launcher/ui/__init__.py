"""Live views of a launch: a pure model of its events, and views that draw it.

``ui="widgets"`` shows a status table and metric charts in the notebook (a static copy of the
final state stays in the cell), ``"console"`` prints plain-text status, ``"none"`` only keeps the
model; ``"auto"`` picks widgets inside a Jupyter kernel and the console elsewhere. Nothing here
imports ipywidgets until widgets are used.
"""

from __future__ import annotations

from ..utils.environment import in_kernel
from .choose import UI_CHOICES, check_ui, create_view, resolve_ui
from .model import RankState, RunModel
from .report import RunPanel
from .series import MetricSeries, Series
from .views import ConsoleView, View

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
