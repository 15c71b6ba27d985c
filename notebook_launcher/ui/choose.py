"""Which view a launch gets: widgets in a Jupyter kernel, plain text elsewhere, or none."""

from __future__ import annotations

from ..utils.environment import in_kernel
from ..utils.validation import invalid
from .model import RunModel
from .views import ConsoleView, View
from .widgets import WidgetView

# Each ``ui=`` value and the view it stands for; "auto" picks one of them (see resolve_ui).
VIEWS: dict[str, type[View]] = {
    "widgets": WidgetView,
    "console": ConsoleView,
    "none": View,
}
UI_CHOICES = ("auto", *VIEWS)


def check_ui(ui: object) -> str:
    """Raise ValueError unless ``ui`` is one of :data:`UI_CHOICES`."""
    if not isinstance(ui, str) or ui not in UI_CHOICES:
        raise invalid("ui", ui, "allowed values are " + ", ".join(map(repr, UI_CHOICES)))
    return ui


def resolve_ui(ui: str) -> str:
    """The view ``ui`` stands for here: a key of :data:`VIEWS`."""
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
    num_processes: int,
    output: str = "all",
    *,
    first_rank: int = 0,
    background: bool = False,
    show: bool = True,
) -> View:
    """The view of a launch of ``num_processes`` ranks.

    Args:
        ui: "auto" or a key of :data:`VIEWS` ("widgets", "console", "none").
        num_processes: number of ranks (of this node).
        output: the launch's output policy; hidden ranks' lines are not shown in the table.
        first_rank: the global rank of this node's first process.
        background: the run is supervised from a background thread (widgets then also keep the
            last worker lines under the table).
        show: put the view on screen now (widgets: in the current cell).
    """
    model = RunModel(num_processes, output=output, first_rank=first_rank)
    view = VIEWS[resolve_ui(ui)].for_launch(model, background=background)
    if show:
        view.show()
    return view
