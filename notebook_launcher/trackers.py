"""Experiment trackers for the Accelerator: the notebook's live panels and TensorBoard.

``Accelerator(log_with="notebook")`` sends every ``accelerator.log(...)`` to the launching
notebook over the launcher's event channel (:func:`notebook_launcher.tracking.log`), where the
metrics panel charts each rank and their mean. ``log_with="tensorboard"`` writes event files
with ``torch.utils.tensorboard`` when the ``tensorboard`` package is installed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from .state.enums import LoggerType
from .utils.validation import invalid

NOTEBOOK = "notebook"


class GeneralTracker:
    """The base of every tracker: subclass it to plug in your own.

    Attributes:
        name: the name ``get_tracker`` finds it by.
        requires_logging_directory: whether it needs ``logging_dir``.
        main_process_only: log on the main process only (else on every process).
    """

    name: str = "general"
    requires_logging_directory: bool = False
    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        self._blank = _blank

    def start(self) -> None:
        """Open the run (called by ``init_trackers``)."""

    def store_init_configuration(self, values: dict) -> None:
        """Record the run's settings (hyperparameters)."""

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` at ``step``."""

    def finish(self) -> None:
        """Close the run (called by ``end_training``)."""

    @property
    def tracker(self) -> Any:
        """The underlying run object (None for a blank tracker)."""
        return None


class NotebookTracker(GeneralTracker):
    """Charts metrics live in the launching notebook, per rank and their mean.

    Numbers are sent; other values (strings) are left out. Outside a launched worker nothing
    is sent. Every process logs its own values.

    Args:
        run_name: the project name (kept as ``run_name``).
    """

    name = NOTEBOOK
    main_process_only = False

    def __init__(self, run_name: str = "") -> None:
        super().__init__()
        self.run_name = run_name
        self.config: dict = {}

    def store_init_configuration(self, values: dict) -> None:
        self.config = dict(values)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        from . import tracking

        numbers = {k: v for k, v in values.items() if not isinstance(v, (str, bytes, dict))}
        if numbers:
            tracking.log(numbers, step=step)

    def finish(self) -> None:
        """Nothing to close: the worker sends what is left when the launched function returns."""


class TensorBoardTracker(GeneralTracker):
    """Writes scalars (and the configuration) to TensorBoard event files, from the main process.

    Args:
        run_name: the sub-directory of ``logging_dir`` the run writes to.
        logging_dir: the root directory of the logs.
        **kwargs: passed to ``torch.utils.tensorboard.SummaryWriter``.
    """

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__()
        from torch.utils.tensorboard import SummaryWriter

        self.run_name = run_name
        self.logging_dir = os.path.join(os.fspath(logging_dir), run_name)
        self.writer = SummaryWriter(self.logging_dir, **kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    def store_init_configuration(self, values: dict) -> None:
        flat = {k: v for k, v in values.items() if isinstance(v, (int, float, str, bool))}
        self.writer.add_hparams(flat, metric_dict={}, run_name=".")
        self.writer.flush()

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            if isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, Mapping):
                self.writer.add_scalars(key, dict(value), global_step=step, **kwargs)
            else:
                self.writer.add_scalar(key, float(value), global_step=step, **kwargs)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


BUILT_IN: dict[str, type[GeneralTracker]] = {
    NOTEBOOK: NotebookTracker,
    "tensorboard": TensorBoardTracker,
}
_PACKAGES = {"tensorboard": "tensorboard", NOTEBOOK: None}


def _available(name: str) -> bool:
    package = _PACKAGES.get(name)
    return package is None or importlib.util.find_spec(package) is not None


def resolve_trackers(log_with: Any, logging_dir: str | None) -> list[str | GeneralTracker]:
    """Check ``log_with`` and return the tracker names and instances to start.

    Raises:
        TypeError: an entry is neither a name nor a ``GeneralTracker``.
        ValueError: an unknown name, a tracker whose package is not installed, or one that
            needs a logging directory when none was given.
        NotImplementedError: a tracker Accelerate integrates that has no adapter here.
    """
    if log_with is None:
        return []
    entries = log_with if isinstance(log_with, (list, tuple)) else [log_with]
    allowed = ", ".join(repr(n) for n in [NOTEBOOK, *LoggerType.list()])
    chosen: list[str | GeneralTracker] = []
    for entry in entries:
        if isinstance(entry, GeneralTracker):
            chosen.append(entry)
            continue
        if isinstance(entry, LoggerType):  # not a str, as in Accelerate
            entry = entry.value
        if not isinstance(entry, str):
            raise invalid("log_with", entry, f"expected a tracker name ({allowed})", TypeError)
        name = str(entry).lower()
        if name == LoggerType.ALL.value:
            chosen.extend(n for n in BUILT_IN if _available(n) and n not in chosen)
            continue
        if name not in BUILT_IN:
            if name in LoggerType:
                raise NotImplementedError(
                    f"log_with={entry!r}: only 'notebook' and 'tensorboard' are built in; pass an "
                    f"instance of a GeneralTracker subclass that wraps {name}"
                )
            raise invalid("log_with", entry, f"allowed values are {allowed}")
        if BUILT_IN[name].requires_logging_directory and logging_dir is None:
            raise ValueError(
                f"log_with={entry!r} writes files: pass project_dir=... (or a "
                "ProjectConfiguration with logging_dir) to the Accelerator"
            )
        if not _available(name):
            raise ValueError(
                f"log_with={entry!r} needs the {_PACKAGES[name]} package, which is not "
                f"installed: pip install {_PACKAGES[name]}"
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


def build_tracker(
    entry: str | GeneralTracker, project_name: str, logging_dir: str | None, kwargs: dict
) -> GeneralTracker:
    """The started-to-be tracker for a name (or the instance itself)."""
    if isinstance(entry, GeneralTracker):
        return entry
    cls = BUILT_IN[entry]
    if cls.requires_logging_directory:
        return cls(project_name, logging_dir, **kwargs)
    return cls(project_name, **kwargs)
