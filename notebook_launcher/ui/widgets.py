"""The live notebook panels: the status table and the metric charts, each one HTML widget.

Widget traffic stays far below what Jupyter Server drops (about 1000 messages/s): the status
table is redrawn at most 5 times a second, the charts at most once a second, and a value equal
to the one shown is never sent. Works with ipywidgets 7 and 8 (core widgets only).

When the run ends the widgets leave the cell and a static copy of the final panel (HTML and
inline SVG, a line of text) takes their place, so a saved notebook, its HTML export and any
viewer show the final state without a kernel, a widget library or a network connection. A
blocking launch creates its widgets only once it has run for ``SHOW_AFTER`` seconds, so a quick
run costs no widget traffic and leaves the same final panel.
"""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

from ..utils.environment import in_kernel
from .charts import metrics_html
from .folding import rank_lines_up_to
from .model import RunModel
from .render import status_html
from .report import BOUNDED_OUTPUT, RunPanel, log_html
from .views import View

BACKGROUND_LOG_LINES = 20  # worker lines kept under a background run's panel

STATUS_EVERY = 0.2  # seconds between redraws of the status table (5 Hz)
CHARTS_EVERY = 1.0  # seconds between redraws of the charts (1 Hz)
EVERY_RANK_EVERY = 1.0  # ... of the table of every rank, under the folded one (1 Hz)
# A blocking launch puts its widgets on screen once it is this old: a shorter run (a quick check,
# a relaunch in a loop) pays for no widget at all and shows its final panel only.
SHOW_AFTER = 0.3
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def widget_bundle(widget: Any) -> dict[str, Any]:
    """The display data of a widget view, without a text fallback.

    nbval skips widget views, so a launch's output compares equal however long the run took;
    the static copy left when the run ends holds the text it compares.
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

    def retract(self, count: int) -> None:
        """Take back the last ``count`` lines written (they are shown elsewhere instead)."""
        for _ in range(min(count, len(self.lines))):
            self.lines.pop()
        self.version += 1

    def html(self) -> str:
        return log_html(self.lines)


class WidgetView(View):
    """Status table and charts as ipywidgets ``HTML`` widgets in one ``VBox``.

    Args:
        model: the run's model.
        log_lines: keep and show this many lines of worker output under the table (0: none; the
            lines go to the cell as usual).
        in_place: what the cell keeps of a displayed view once the run ends. False (a blocking
            launch, whose cell still runs): the widgets' output is emptied and the final panel
            displayed after the run's output, where the cell is at. True (a run supervised in the
            background, whose cell may have ended): the widgets' output becomes the final panel.
    """

    kind = "widgets"

    def __init__(self, model: RunModel, log_lines: int = 0, in_place: bool = False) -> None:
        super().__init__(model)
        self.in_place = in_place
        self.display_id: str | None = None  # set once the widgets are displayed
        self._show_at: float | None = None  # a deferred show(): when the widgets go on screen
        self._widgets: Any = None
        self.log: LogTail | None = None
        if log_lines:
            self.log = LogTail(log_lines)
            self.streams = (self.log, self.log)
        self._next_status = self._next_charts = model.clock()
        self._charts_drawn = 0
        self._log_drawn = 0
        self._next_every = model.clock()
        self._every_drawn = -1
        self.every: Any = None  # the table of every rank (many ranks only)

    @property
    def widget(self) -> Any:
        """The panel's ``VBox`` (the widgets are created on first use)."""
        if self._widgets is None:
            self._build()
        return self._widgets

    def _build(self) -> None:
        import ipywidgets as widgets  # only once widgets are drawn: optional outside Jupyter

        now = self.model.clock()
        self.status = widgets.HTML(value=status_html(self.model, now))
        self.charts = widgets.HTML(value="")
        self.log_widget = widgets.HTML(value="") if self.log is not None else None
        self.style = widgets.HTML(value=BOUNDED_OUTPUT)
        self.accordion = None
        if self.model.num_processes > rank_lines_up_to():
            # Opened in the browser without the kernel's help (its cell is still running).
            self.every = widgets.HTML(value="")
            self.accordion = widgets.Accordion(children=[self.every], selected_index=None)
            self.accordion.set_title(0, f"every rank ({self.model.num_processes})")
        children = [self.status, self.accordion, self.charts, self.log_widget, self.style]
        self._widgets = widgets.VBox([w for w in children if w is not None])
        self._widgets.add_class("nl-live")
        self._next_status = now + STATUS_EVERY

    @classmethod
    def for_launch(cls, model: RunModel, background: bool = False) -> WidgetView:
        # A background run's output has no cell to go to: its last lines go under the table, and
        # its final panel replaces the widgets where they are.
        lines = BACKGROUND_LOG_LINES if background else 0
        return cls(model, log_lines=lines, in_place=background)

    def show(self) -> None:
        """Put the widgets in the current cell: at once for a background run (its cell may end
        any moment), else once the run is :data:`SHOW_AFTER` seconds old. A shorter run creates
        no widget at all: its final panel is the first thing drawn."""
        if not in_kernel():  # no frontend to show widgets to
            return
        if self.in_place:
            self._display()
        else:
            self._show_at = self.model.started + SHOW_AFTER

    def _display(self) -> None:
        from IPython.display import display

        self._show_at = None
        self.display_id = f"notebook_launcher-{uuid.uuid4().hex}"
        display(widget_bundle(self.widget), raw=True, display_id=self.display_id)

    def refresh(self, now: float) -> None:
        if self._show_at is not None and now >= self._show_at:
            self._display()
        if self._widgets is None:
            return
        if now >= self._next_status:
            self._next_status = now + STATUS_EVERY
            self.status.value = status_html(self.model, now)
            self._draw_log()
        if self.every is not None and now >= self._next_every:
            self._next_every = now + EVERY_RANK_EVERY
            if self.model.version != self._every_drawn:
                self._every_drawn = self.model.version
                self.every.value = status_html(self.model, now, every_rank=True, heading=False)
        if now >= self._next_charts and self.model.metrics_version != self._charts_drawn:
            self._next_charts = now + CHARTS_EVERY
            self._charts_drawn = self.model.metrics_version
            self.charts.value = metrics_html(self.model)

    def draw_now(self, now: float) -> None:
        # A prompt that opens before the widgets were due (a quick session call) shows them now:
        # the status table is what says which rank waits in the debugger.
        if self._show_at is not None:
            self._display()
        if self._widgets is None:
            return
        self._next_status = now + STATUS_EVERY
        self.status.value = status_html(self.model, now)
        self._draw_log()

    def _draw_log(self) -> None:
        if self.log is not None and self.log.version != self._log_drawn:
            self._log_drawn = self.log.version
            self.log_widget.value = self.log.html()

    def final_panel(self) -> RunPanel:
        """The run's final table and charts as static HTML, with the worker lines it kept."""
        return RunPanel(self.model, self.log.lines if self.log is not None else ())

    def final(self) -> None:
        from IPython.display import display, update_display

        if self._show_at is not None:  # ended before its widgets were due: the final panel only
            self._show_at = None
            display(self.final_panel()._repr_mimebundle_(), raw=True)
            return
        if self.display_id is None:  # not in a cell (the config panel shows it): draw it there
            if self._widgets is None:
                return
            now = self.model.clock()
            self.status.value = status_html(self.model, now)
            self.charts.value = metrics_html(self.model)
            if self.every is not None:
                self.every.value = status_html(self.model, now, every_rank=True, heading=False)
            self._draw_log()
            return
        bundle = self.final_panel()._repr_mimebundle_()
        if self.in_place:
            update_display(bundle, raw=True, display_id=self.display_id)
        else:
            # An output without data is drawn as nothing; nbval, which skips widget views,
            # compares the same outputs before and after.
            update_display({}, raw=True, display_id=self.display_id)
            display(bundle, raw=True)
        self.close()

    def close(self) -> None:
        """Close the widgets (their models in the kernel and the frontend)."""
        if self._widgets is None:
            return
        parts = (self.status, self.charts, self.log_widget, self.style, self.accordion, self.every)
        for widget in (self._widgets, *parts):
            if widget is not None:
                widget.close()
