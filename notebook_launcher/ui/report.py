"""The final state of a run as something a notebook can display (and save) without widgets."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..utils.environment import in_kernel
from .charts import metrics_html
from .model import RunModel
from .render import compact_html, status_html, status_text, summary_line

OUTPUT_HEIGHT = "22em"  # the height of the cell's worker output beside a panel
# In a cell with a live panel or its final copy, JupyterLab shows the worker output in a box of
# its own height, scrolled to its latest line, so the table, the charts and the cell's result
# stay in view however much the ranks print (scroll in the box to read it all).
BOUNDED_OUTPUT = (
    "<style>"
    ":is(.jp-Cell:has(.nl-live),.jp-Cell:has(.nl-panel)) .jp-RenderedText:is("
    "[data-mime-type='application/vnd.jupyter.stdout'],"
    "[data-mime-type='application/vnd.jupyter.stderr'])"
    f"{{max-height:{OUTPUT_HEIGHT};overflow-y:auto;display:flex;flex-direction:column-reverse}}"
    ":is(.jp-Cell:has(.nl-live),.jp-Cell:has(.nl-panel)) .jp-RenderedText > pre{flex-shrink:0}"
    "</style>"
)


class RunPanel:
    """A run's status table and metric charts, drawn from its final model.

    Displaying it shows static HTML with the charts as SVG images (no script, no widget: kept in
    saved and exported notebooks, shown without a kernel or a network) and, as text, one line
    without timings. A run that logged nothing (no metrics, progress or status) is drawn in one
    line.

    Args:
        model: the run's model.
        log: the last lines of worker output to show under the table (background runs).
        every_rank: a row and a chart line per rank however many ranks there are (else alike
            rows are folded and charts draw the mean and the min-max band above 8 ranks).

    Attributes:
        model: the run's :class:`~notebook_launcher.ui.model.RunModel`.
    """

    def __init__(self, model: RunModel, log: Sequence[str] = (), every_rank: bool = False) -> None:
        if not isinstance(model, RunModel):
            raise TypeError(f"model={model!r} is not valid: expected a RunModel")
        if not isinstance(every_rank, bool):
            raise TypeError(f"every_rank={every_rank!r} is not valid: expected True or False")
        self.model = model
        self.log = tuple(log)
        self.every_rank = every_rank

    def html(self) -> str:
        """The status table and the charts (or the one-line form) as one HTML fragment."""
        now = self.model.clock()
        if self.model.quiet and self.model.outcome != "running":
            body = compact_html(self.model, now)
        else:
            every = self.every_rank
            body = status_html(self.model, now, every_rank=every)
            body += metrics_html(self.model, static=True, every_rank=every)
            if not every and 'data-rows="' in body and len(self.model.ranks) > _rows(body):
                body += every_rank_html(
                    status_html(self.model, now, every_rank=True, heading=False)
                )
        if self.log:
            body += log_html(self.log)
        return f'<div class="nl-panel">{BOUNDED_OUTPUT}{body}</div>'

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

    def show(self, every_rank: bool = False) -> None:
        """Display the final table and charts in the current cell (as text outside a kernel).

        Kept in the saved notebook, as the copy a launch leaves in its cell is.

        Args:
            every_rank: a row and a chart line per rank, however many ranks there are.
        """
        if in_kernel():
            from IPython.display import display

            display(RunPanel(self.model, self.log, every_rank) if every_rank else self)
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


def _rows(body: str) -> int:
    return int(body.split('data-rows="', 1)[1].split('"', 1)[0])


def every_rank_html(table: str) -> str:
    """The table of every rank, folded away under the table of alike ranks (opened by a click;
    no script)."""
    return (
        '<details class="nl-every-rank" style="font-size:12px;margin:2px 0">'
        f"<summary>every rank</summary>{table}</details>"
    )
