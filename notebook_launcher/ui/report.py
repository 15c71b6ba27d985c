"""The final state of a run as something a notebook can display (and save) without widgets."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..utils.environment import in_kernel
from .charts import metrics_html
from .model import RunModel
from .render import compact_html, status_html, status_text, summary_line


class RunPanel:
    """A run's status table and metric charts, drawn from its final model.

    Displaying it shows static HTML with the charts as SVG images (no script, no widget: kept in
    saved and exported notebooks, shown without a kernel or a network) and, as text, one line
    without timings. A run that logged nothing (no metrics, progress or status) is drawn in one
    line.

    Args:
        model: the run's model.
        log: the last lines of worker output to show under the table (background runs).

    Attributes:
        model: the run's :class:`~notebook_launcher.ui.model.RunModel`.
    """

    def __init__(self, model: RunModel, log: Sequence[str] = ()) -> None:
        if not isinstance(model, RunModel):
            raise TypeError(f"model={model!r} is not valid: expected a RunModel")
        self.model = model
        self.log = tuple(log)

    def html(self) -> str:
        """The status table and the charts (or the one-line form) as one HTML fragment."""
        now = self.model.clock()
        if self.model.quiet and self.model.outcome != "running":
            body = compact_html(self.model, now)
        else:
            body = status_html(self.model, now) + metrics_html(self.model, static=True)
        if self.log:
            body += log_html(self.log)
        return f'<div class="nl-panel">{body}</div>'

    def text(self) -> str:
        """The status table as plain text."""
        return status_text(self.model, self.model.clock())

    def summary(self) -> str:
        """One deterministic line: the ranks' states, the cause of a failure, the metric names."""
        return summary_line(self.model)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.html(), "text/plain": self.summary()}

    def __repr__(self) -> str:
        return f"RunPanel({self.model.summary()})"

    def show(self) -> None:
        """Display the final table and charts in the current cell (as text outside a kernel).

        Kept in the saved notebook, as the copy a launch leaves in its cell is.
        """
        if in_kernel():
            from IPython.display import display

            display(self)
        else:
            print(self.text())


def log_html(lines: Sequence[str]) -> str:
    """Worker output lines (escaped) in a small scrolling block."""
    if not lines:
        return ""
    body = html.escape("\n".join(lines))
    return (
        '<pre class="nl-log" style="font-size:11px;line-height:1.3;margin:4px 0;'
        f'max-height:16em;overflow:auto">{body}</pre>'
    )
