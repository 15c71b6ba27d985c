"""Which view a launch gets: widgets in a Jupyter kernel, plain text elsewhere, or none."""

from __future__ import annotations

from ..utils.environment import in_kernel
from .model import RunModel
from .views import ConsoleView, View
from .widgets import WidgetView

UI_CHOICES = ("auto", "widgets", "console", "none")
BACKGROUND_LOG_LINES = 20  # worker lines kept under a background run's panel


def check_ui(ui: object) -> str:
    """Raise ValueError unless ``ui`` is one of "auto", "widgets", "console", "none"."""
    if not isinstance(ui, str) or ui not in UI_CHOICES:
        raise ValueError(
            f"ui={ui!r} is not valid: allowed values are " + ", ".join(map(repr, UI_CHOICES))
        )
    return ui


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
            last worker lines under the table (a background run's output has no cell to go to).
        show: display the widgets in the current cell now.
    """
    kind = resolve_ui(ui)
    model = RunModel(world_size, output=output, first_rank=first_rank)
    if kind == "widgets":
        view: View = WidgetView(model, log_lines=BACKGROUND_LOG_LINES if background else 0)
        if show:
            view.show()
        return view
    if kind == "console":
        return ConsoleView(model)
    return View(model)
