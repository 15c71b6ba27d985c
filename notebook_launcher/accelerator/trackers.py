"""Experiment trackers for the Accelerator: the notebook's live panels and TensorBoard.

``Accelerator(log_with="notebook")`` sends every ``accelerator.log(...)`` to the launching
notebook over the launcher's event channel (:func:`notebook_launcher.log`), where the
metrics panel charts each rank and their mean. ``log_with="tensorboard"`` writes event files
with ``torch.utils.tensorboard`` when the ``tensorboard`` package is installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator, Mapping
from typing import Any

from ..utils.enums import LoggerType
from ..utils.profiling import ProfileKwargs
from ..utils.validation import invalid
from ..worker import live

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
        numbers = {k: v for k, v in values.items() if not isinstance(v, (str, bytes, dict))}
        if numbers:
            live.log(numbers, step=step)

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


PROFILE_FILE = "profile_{}.json"


class Trackers:
    """An Accelerator's part that records a run: its experiment trackers, and the profiler.

    Args:
        state: the job's ``AcceleratorState``.
        log_with: the resolved ``log_with`` (tracker names and ``GeneralTracker`` objects).
        project_configuration: where trackers that write files log to.
        profile_handler: the Accelerator's ``ProfileKwargs``, or None.

    Attributes:
        trackers: the trackers started on this process, in ``log_with`` order.
    """

    def __init__(
        self,
        state: Any,
        log_with: list[str | GeneralTracker],
        project_configuration: Any,
        profile_handler: ProfileKwargs | None = None,
    ) -> None:
        self.state = state
        self.log_with = log_with
        self.project_configuration = project_configuration
        self.profile_handler = profile_handler
        self.trackers: list[GeneralTracker] = []

    def init_trackers(
        self, project_name: str, config: dict | None = None, init_kwargs: dict | None = None
    ) -> None:
        """Start a run on every tracker of ``log_with``.

        Args:
            project_name: the name of the run (TensorBoard's sub-directory).
            config: hyperparameters to record.
            init_kwargs: per-tracker constructor arguments, ``{"tensorboard": {...}}``.

        Raises:
            TypeError: an argument of the wrong type.
        """
        if not isinstance(project_name, str):
            raise invalid("project_name", project_name, "expected a str", TypeError)
        if config is not None and not isinstance(config, dict):
            raise invalid("config", config, "expected a dict or None", TypeError)
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise invalid("init_kwargs", init_kwargs, "expected a dict or None", TypeError)
        init_kwargs = init_kwargs or {}
        main = self.state.is_main_process
        for entry in self.log_with:
            name = entry.name if isinstance(entry, GeneralTracker) else entry
            tracker_cls = type(entry) if isinstance(entry, GeneralTracker) else None
            if tracker_cls is None:
                tracker_cls = BUILT_IN[entry]
            if tracker_cls.main_process_only and not main:
                continue
            tracker = build_tracker(
                entry,
                project_name,
                self.project_configuration.logging_dir,
                init_kwargs.get(name, {}),
            )
            self.trackers.append(tracker)
        for tracker in self.trackers:
            tracker.start()
            if config is not None:
                tracker.store_init_configuration(config)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The started tracker called ``name`` (its run object with ``unwrap``).

        Raises:
            ValueError: no tracker of that name was started on this process.
        """
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        if not self.state.is_main_process:
            return GeneralTracker(_blank=True)
        started = ", ".join(repr(t.name) for t in self.trackers) or "none"
        raise invalid("name", name, f"started trackers: {started}")

    def log(self, values: dict, step: int | None = None, log_kwargs: dict | None = None) -> None:
        """Send ``values`` to every started tracker (per-tracker ``log_kwargs`` by name).

        Raises:
            TypeError: ``values`` is not a dict or ``step`` not an int.
        """
        if not isinstance(values, dict):
            raise invalid("values", values, "expected a dict of names to values", TypeError)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise invalid("step", step, "expected an int or None", TypeError)
        log_kwargs = log_kwargs or {}
        for tracker in self.trackers:
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))

    def end_training(self) -> None:
        """Finish every tracker's run and wait for every process."""
        for tracker in self.trackers:
            tracker.finish()
        self.trackers.clear()
        self.state.wait_for_everyone()

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Profile the block with ``torch.profiler``; yields the profiler.

        With ``output_trace_dir`` set, each process writes ``profile_<rank>.json`` there.

        Raises:
            TypeError: ``profile_handler`` is not a ProfileKwargs.
        """
        if profile_handler is not None and not isinstance(profile_handler, ProfileKwargs):
            raise invalid(
                "profile_handler", profile_handler, "expected a ProfileKwargs or None", TypeError
            )
        handler = profile_handler or self.profile_handler or ProfileKwargs()
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir is not None:
            os.makedirs(handler.output_trace_dir, exist_ok=True)
            name = PROFILE_FILE.format(self.state.process_index)
            profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, name))
        self.state.wait_for_everyone()
