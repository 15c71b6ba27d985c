"""rich in a launched worker: plain text lines on the captured streams, progress in the panel.

rich decides once per ``Console`` how to show things. In a worker forked from a Jupyter kernel
it finds the kernel's IPython shell and sends its output as notebook display messages, which
ipykernel drops when a forked process sends them, so ``rich.print``, a ``RichHandler`` and a
``rich.progress`` bar show nothing. The kernel also sets ``FORCE_COLOR``, with which a console
on a pipe would write colours and cursor movements meant for a terminal. In a worker, a console
writing to the worker's stdout or stderr (the pipes the launcher labels line by line) is
neither a notebook nor a terminal, and has no colours: it writes plain lines, consoles created
in the kernel before the launch included. A console writing to a file of its own (a
``StringIO``, an opened file) keeps whatever it was asked for.

A ``rich.progress.Progress`` shows its latest running task in the rank's progress column of the
status panel; on the captured streams it writes its final state when it stops, as rich does
when not on a terminal.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from .. import live
from . import hooks
from .bars import NestedBar

_CAPTURED_FDS = (1, 2)


def _captured(console: Any) -> bool:
    """Whether ``console`` writes to the worker's stdout or stderr."""
    try:
        file = console.file
    except Exception:
        return False
    if file is sys.stdout or file is sys.stderr:
        return True
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is not None and isinstance(file, iostream.OutStream):
        return True  # the kernel's stream, which the worker bootstrap forwards to its own
    try:
        return file.fileno() in _CAPTURED_FDS
    except Exception:
        return False


class _ColourSystem:
    """``Console._color_system`` as stored, but none for a console on the captured streams."""

    def __get__(self, console: Any, owner: type | None = None) -> Any:
        if console is None:
            return self
        if _captured(console):
            return None
        return console.__dict__.get("_color_system")

    def __set__(self, console: Any, value: Any) -> None:
        console.__dict__["_color_system"] = value


def plain_consoles(module: Any) -> None:
    """Make every ``module.Console`` (``rich.console``) write plain lines to captured streams."""
    console = module.Console
    is_terminal = console.__dict__["is_terminal"]

    def terminal(self: Any) -> bool:
        return False if _captured(self) else is_terminal.fget(self)

    # Properties on the class take precedence over what each console stored when it was made,
    # so consoles made in the kernel before the fork are corrected too.
    hooks.replace(console, "is_jupyter", property(lambda self: False, lambda self, value: None))
    hooks.replace(console, "is_terminal", property(terminal))
    hooks.replace(console, "_color_system", _ColourSystem())


class RichProgress(NestedBar):
    """What the status panel reads from a ``rich.progress.Progress`` (see
    :class:`.bars.NestedBar`): its latest visible unfinished task, or the last task once all
    are done."""

    def __init__(self, progress: Any, under: Any = None) -> None:
        super().__init__(under)
        self.progress = progress
        self._started = time.monotonic()

    def _tasks(self) -> list[Any]:
        return [task for task in list(self.progress.tasks) if task.visible]

    @property
    def own_closed(self) -> bool:
        live_display = getattr(self.progress, "live", None)
        stopped = live_display is not None and not live_display.is_started
        tasks = self._tasks()
        return stopped or bool(tasks) and all(task.finished for task in tasks)

    def own_snapshot(self) -> tuple[str | None, int, int | None, float]:
        tasks = self._tasks()
        running = [task for task in tasks if not task.finished]
        task = (running or tasks or [None])[-1]
        if task is None:
            return (None, 0, None, time.monotonic() - self._started)
        total = None if task.total is None else int(task.total)
        elapsed = task.elapsed if task.elapsed is not None else time.monotonic() - self._started
        return (_plain(task.description), int(task.completed), total, float(elapsed))


def _plain(description: Any) -> str | None:
    """A task description without rich's markup ("[bold]train" is "train")."""
    text = str(description or "")
    markup = sys.modules.get("rich.text")
    if markup is not None:
        try:
            text = markup.Text.from_markup(text).plain
        except Exception:
            pass
    return text.strip().rstrip(":") or None


def progress_in_panel(module: Any) -> None:
    """Show each ``module.Progress`` (``rich.progress``) in the panel once it has a task."""

    def add_task(wrapped: Any, progress: Any, args: Any, kwargs: Any) -> Any:
        task_id = wrapped(*args, **kwargs)
        shown = live.shown_progress()
        if isinstance(shown, RichProgress) and shown.progress is progress:
            return task_id
        if isinstance(shown, live.Progress) and not shown.closed:
            return task_id  # an explicit notebook_launcher.progress keeps the column
        live.show_progress(RichProgress(progress, shown))
        return task_id

    hooks.wrap_method(module.Progress, "add_task", add_task)
