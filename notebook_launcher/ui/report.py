"""The final state of a run as something a notebook can display (and save) without widgets."""

from __future__ import annotations

from typing import Any

from ..utils.environment import in_kernel
from .charts import metrics_html
from .model import RunModel
from .render import status_html, status_text
from .widgets import WidgetView


class RunPanel:
    """A run's status table and metric charts, drawn from its final model.

    Displaying it shows static HTML (kept in saved and exported notebooks) with a one-line text
    fallback; :meth:`show` draws the live widgets again.

    Attributes:
        model: the run's :class:`~notebook_launcher.ui.model.RunModel`.
    """

    def __init__(self, model: RunModel) -> None:
        if not isinstance(model, RunModel):
            raise TypeError(f"model={model!r} is not valid: expected a RunModel")
        self.model = model

    def html(self) -> str:
        """The status table and the charts as one HTML fragment."""
        now = self.model.clock()
        return (
            f'<div class="nl-panel">{status_html(self.model, now)}{metrics_html(self.model)}</div>'
        )

    def text(self) -> str:
        """The status table as plain text."""
        return status_text(self.model, self.model.clock())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.html(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        return f"RunPanel({self.model.summary()})"

    def show(self) -> None:
        """Draw the status table and charts as widgets in the current cell (as text elsewhere)."""
        if in_kernel():
            view = WidgetView(self.model)
            view.show()
            view.finished = True
            view.final()
        else:
            print(self.text())
