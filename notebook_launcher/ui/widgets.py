"""The live notebook panels: the status table and the metric charts, each one HTML widget.

Widget traffic stays far below what Jupyter Server drops (about 1000 messages/s): the status
table is redrawn at most 5 times a second, the charts at most once a second, and a value equal
to the one shown is never sent. Works with ipywidgets 7 and 8 (core widgets only).
"""

from __future__ import annotations

import html
from collections import deque
from typing import Any

from ..utils.environment import in_kernel
from .charts import metrics_html
from .model import RunModel
from .render import status_html
from .views import View

BACKGROUND_LOG_LINES = 20  # worker lines kept under a background run's panel

STATUS_EVERY = 0.2  # seconds between redraws of the status table (5 Hz)
CHARTS_EVERY = 1.0  # seconds between redraws of the charts (1 Hz)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def widget_bundle(widget: Any) -> dict[str, Any]:
    """The display data of a widget view, without a text fallback.

    A launch's output then compares equal however long the run took (nbval skips widget views);
    the static copy of the final state is ``result.panel`` (text/html and text/plain).
    """
    return {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}}


class LogTail:
    """The last lines of worker output, for runs whose output has no cell to go to.

    A file-like object (``write``/``flush``) for the launcher's output sink. Appending costs
    nothing on the wire; the widget is redrawn with the status table.
    """

    def __init__(self, lines: int) -> None:
        self.lines: deque[str] = deque(maxlen=lines)
        self.version = 0

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.lines.append(line)
        self.version += 1
        return len(text)

    def flush(self) -> None:
        pass

    def html(self) -> str:
        if not self.lines:
            return ""
        body = html.escape("\n".join(self.lines))
        return (
            '<pre class="nl-log" style="font-size:11px;line-height:1.3;margin:4px 0;'
            f'max-height:16em;overflow:auto">{body}</pre>'
        )


class WidgetView(View):
    """Status table and charts as ipywidgets ``HTML`` widgets in one ``VBox``.

    Args:
        model: the run's model.
        log_lines: keep and show this many lines of worker output under the table (0: none; the
            lines go to the cell as usual).
    """

    kind = "widgets"

    def __init__(self, model: RunModel, log_lines: int = 0) -> None:
        super().__init__(model)
        import ipywidgets as widgets  # only once widgets are drawn: optional outside Jupyter

        now = model.clock()
        self.status = widgets.HTML(value=status_html(model, now))
        self.charts = widgets.HTML(value="")
        children = [self.status, self.charts]
        self.log: LogTail | None = None
        self.log_widget = None
        if log_lines:
            self.log = LogTail(log_lines)
            self.log_widget = widgets.HTML(value="")
            children.append(self.log_widget)
            self.streams = (self.log, self.log)
        self.widget = widgets.VBox(children)
        self._next_status = now + STATUS_EVERY
        self._next_charts = now
        self._charts_drawn = 0
        self._log_drawn = 0

    @classmethod
    def for_launch(cls, model: RunModel, background: bool = False) -> WidgetView:
        # A background run's output has no cell to go to: its last lines go under the table.
        return cls(model, log_lines=BACKGROUND_LOG_LINES if background else 0)

    def show(self) -> None:
        if not in_kernel():  # no frontend to show widgets to
            return
        from IPython.display import display

        display(widget_bundle(self.widget), raw=True)

    def refresh(self, now: float) -> None:
        if now >= self._next_status:
            self._next_status = now + STATUS_EVERY
            self.status.value = status_html(self.model, now)
            self._draw_log()
        if now >= self._next_charts and self.model.metrics_version != self._charts_drawn:
            self._next_charts = now + CHARTS_EVERY
            self._charts_drawn = self.model.metrics_version
            self.charts.value = metrics_html(self.model)

    def _draw_log(self) -> None:
        if self.log is not None and self.log.version != self._log_drawn:
            self._log_drawn = self.log.version
            self.log_widget.value = self.log.html()

    def final(self) -> None:
        now = self.model.clock()
        self.status.value = status_html(self.model, now)
        self.charts.value = metrics_html(self.model)
        self._draw_log()
