"""Views: consumers of launch events that keep a :class:`RunModel` and draw it at a throttled rate.

A view is called with every event (it is one of the supervisor's listeners) and finished once when
the run ends. Drawing problems never reach the launch: a view that fails stops drawing and says
so once.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, TextIO

from ..protocol.prompts import PromptShown
from .model import RunModel
from .render import status_text

CONSOLE_EVERY = 10.0  # seconds between status tables printed while a run goes on


class View:
    """Keeps the model of a run and draws nothing (``ui="none"``).

    Attributes:
        model: the run's :class:`RunModel`.
        streams: where worker output lines go instead of the kernel's stdout and stderr, or None.
    """

    kind = "none"
    streams: tuple[Any, Any] | None = None

    def __init__(self, model: RunModel) -> None:
        self.model = model
        self.broken: BaseException | None = None
        self.finished = False

    @classmethod
    def for_launch(cls, model: RunModel, background: bool = False) -> View:
        """The view of a launch (``background``: supervised from a background thread)."""
        return cls(model)

    def __call__(self, event: object) -> None:
        if self.broken is not None:
            return
        try:
            self.model.apply(event)
            if isinstance(event, PromptShown):
                self.draw_now(self.model.clock())
            else:
                self.refresh(self.model.clock())
        except Exception as exc:
            self._broke(exc)

    def refresh(self, now: float) -> None:
        """Redraw what is due at ``now`` (called after every event)."""

    def draw_now(self, now: float) -> None:
        """Draw the live state at once, whatever the rate limit: the cell is about to block (on
        a rank's prompt) and draws nothing more until it is answered."""

    def finish(self) -> None:
        """The run is over: finalise the model and draw the final state once."""
        if self.finished:
            return
        self.finished = True
        try:
            self.model.finish()
            if self.broken is None:
                self.final()
        except Exception as exc:
            self._broke(exc)

    def final(self) -> None:
        """Draw the final state."""

    def show(self) -> None:
        """Put the view on screen (widgets are displayed in the current cell)."""

    def _broke(self, exc: BaseException) -> None:
        self.broken = exc
        warnings.warn(
            f"notebook_launcher: the {self.kind} view stopped drawing the run: {exc!r}",
            RuntimeWarning,
            stacklevel=2,
        )


class ConsoleView(View):
    """Plain-text status for terminals, scripts, CI logs and frontends without widgets.

    Writes whole tables only, from the supervising thread (so never inside a worker's line):
    every ``every`` seconds while a run lasts longer than that, and a final table when it printed
    one before or when the ranks reported metrics, progress or a status. Status goes to stdout;
    the final table of a failed run to stderr. ``stream`` replaces both.
    """

    kind = "console"

    def __init__(
        self, model: RunModel, stream: TextIO | None = None, every: float = CONSOLE_EVERY
    ) -> None:
        super().__init__(model)
        self.stream = stream
        self.every = every
        self.printed = 0
        self._next = model.started + every

    def refresh(self, now: float) -> None:
        if now >= self._next:
            self._next = now + self.every
            self._write(status_text(self.model, now), sys.stdout)

    def final(self) -> None:
        if self.printed or self._reported():
            failed = self.model.outcome == "failed"
            self._write(
                status_text(self.model, self.model.clock()), sys.stderr if failed else sys.stdout
            )

    def _reported(self) -> bool:
        with self.model.lock:
            return bool(self.model.metrics) or any(
                state.done is not None or state.status for state in self.model.ranks
            )

    def _write(self, text: str, default: TextIO) -> None:
        stream = self.stream or default
        stream.write(text + "\n")
        stream.flush()
        self.printed += 1
