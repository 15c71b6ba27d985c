"""Experiment trackers for the Accelerator: the notebook's live panels, TensorBoard, W&B, MLflow.

``Accelerator(log_with="notebook")`` sends every ``accelerator.log(...)`` to the launching
notebook over the launcher's event channel (:func:`notebook_launcher.log`), where the
metrics panel charts each rank and their mean; in a launched worker every Accelerator has this
tracker after those of its ``log_with``, as Accelerate's has there (unless
``NOTEBOOK_LAUNCHER_INTEGRATIONS`` leaves out ``accelerate``). ``log_with="tensorboard"`` writes
event files with ``torch.utils.tensorboard``; ``"wandb"`` and ``"mlflow"`` are in
:mod:`.tracker_adapters`. Tracker objects, this package's or Accelerate's, are taken as they are.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from .. import live
from ..protocol.context import current_context
from ..utils.enums import LoggerType
from ..utils.profiling import ProfileKwargs
from ..utils.validation import invalid
from .tracker_adapters import MLflowTracker, WandBTracker
from .tracker_base import GeneralTracker

NOTEBOOK = "notebook"


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


# The names log_with takes, each with the package it needs (None: none).
PACKAGES: dict[str, str | None] = {
    NOTEBOOK: None,
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
}
_TRACKER_METHODS = ("start", "store_init_configuration", "log", "finish")


def registered_with_accelerate(name: str) -> type | None:
    """The tracker class registered under ``name`` with Accelerate's ``register_tracker_class``
    (looked up only if Accelerate is imported), or None; Accelerate's own trackers are not
    taken, as they have no adapter here."""
    registry = getattr(sys.modules.get("accelerate.tracking"), "LOGGER_TYPE_TO_CLASS", None)
    found = registry.get(name) if isinstance(registry, dict) else None
    if isinstance(found, type) and found.__module__ != "accelerate.tracking":
        return found
    return None


def tracker_class(name: str) -> type:
    """The tracker class of a name of :data:`PACKAGES`, or of one registered with Accelerate.

    Raises:
        KeyError: neither.
    """
    ours = {
        NOTEBOOK: NotebookTracker,
        "tensorboard": TensorBoardTracker,
        "wandb": WandBTracker,
        "mlflow": MLflowTracker,
    }
    if name in ours:
        return ours[name]
    registered = registered_with_accelerate(name)
    if registered is None:
        raise KeyError(name)
    return registered


def _available(name: str) -> bool:
    package = PACKAGES.get(name)
    return package is None or importlib.util.find_spec(package) is not None


def is_foreign_tracker(entry: Any) -> bool:
    """Whether ``entry`` is a tracker object of another library: an instance of Accelerate's
    ``GeneralTracker`` (looked up only if Accelerate is imported), or any object with a
    ``name`` and the methods of a tracker."""
    if isinstance(entry, GeneralTracker) or isinstance(entry, (str, bytes, LoggerType)):
        return False
    theirs = getattr(sys.modules.get("accelerate.tracking"), "GeneralTracker", None)
    if isinstance(theirs, type) and isinstance(entry, theirs):
        return True
    return isinstance(getattr(entry, "name", None), str) and all(
        callable(getattr(entry, method, None)) for method in _TRACKER_METHODS
    )


def _is_tracker(entry: Any) -> bool:
    return isinstance(entry, GeneralTracker) or is_foreign_tracker(entry)


def tracker_name(entry: Any) -> str:
    """The name a tracker (or a tracker name) is found by."""
    return entry if isinstance(entry, str) else entry.name


def resolve_trackers(log_with: Any, logging_dir: str | None) -> list[Any]:
    """Check ``log_with`` and return the tracker names and instances to start.

    Instances are this package's ``GeneralTracker`` subclasses, Accelerate's (``accelerate.
    tracking.GeneralTracker`` subclasses) or any object with ``name``, ``start``,
    ``store_init_configuration``, ``log`` and ``finish``. Names are this package's trackers and
    those of classes registered with Accelerate's ``register_tracker_class``. ``"all"`` is
    every tracker installed (a tracker that writes files only with a logging directory).

    Raises:
        TypeError: an entry is neither a name nor a tracker.
        ValueError: an unknown name or one without an adapter here (naming those supported),
            a tracker whose package is not installed, or one that needs a logging directory
            when none was given.
    """
    if log_with is None:
        return []
    entries = log_with if isinstance(log_with, (list, tuple)) else [log_with]
    supported = ", ".join(repr(n) for n in [*PACKAGES, LoggerType.ALL.value])
    supported += " or a GeneralTracker instance (Accelerate's too)"
    chosen: list[Any] = []
    for entry in entries:
        if _is_tracker(entry):
            chosen.append(entry)
            continue
        if isinstance(entry, LoggerType):  # not a str, as in Accelerate
            entry = entry.value
        if not isinstance(entry, str):
            raise invalid("log_with", entry, f"expected {supported}", TypeError)
        name = str(entry).lower()
        if name == LoggerType.ALL.value:
            # Every tracker installed, as in Accelerate; those that write files only when there
            # is a directory to write to.
            chosen.extend(
                n
                for n in PACKAGES
                if _available(n)
                and n not in chosen
                and (logging_dir is not None or not tracker_class(n).requires_logging_directory)
            )
            continue
        if name not in PACKAGES and registered_with_accelerate(entry) is not None:
            name = entry  # a class registered with Accelerate: its name as registered
        elif name not in PACKAGES:
            why = "no adapter for it here" if name in LoggerType else "unknown tracker"
            raise invalid(
                "log_with",
                entry,
                f"{why}; supported: {supported} (wrap another library in a GeneralTracker "
                "subclass)",
            )
        if tracker_class(name).requires_logging_directory and logging_dir is None:
            raise ValueError(
                f"log_with={entry!r} writes files: pass project_dir=... (or a "
                "ProjectConfiguration with logging_dir) to the Accelerator"
            )
        if not _available(name):
            raise ValueError(
                f"log_with={entry!r} needs the {PACKAGES[name]} package, which is not "
                f"installed: pip install {PACKAGES[name]}"
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


def add_notebook_tracker(chosen: list[Any]) -> list[Any]:
    """``chosen`` with the notebook tracker last, in a launched worker (where Accelerate's
    Accelerator gets one too), unless it is there or the integrations leave Accelerate out."""
    context = current_context()
    if context is None or context.channel is None:
        return chosen
    from ..integrations import enabled_integrations

    if "accelerate" not in enabled_integrations():
        return chosen
    if any(tracker_name(entry) == NOTEBOOK for entry in chosen):
        return chosen
    return [*chosen, NOTEBOOK]


def build_tracker(entry: Any, project_name: str, logging_dir: str | None, kwargs: dict) -> Any:
    """The started-to-be tracker for a name (or the instance itself)."""
    if not isinstance(entry, str):
        return entry
    cls = tracker_class(entry)
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
            name = tracker_name(entry)
            if is_foreign_tracker(entry):
                # Accelerate starts, feeds and finishes trackers on the main process only.
                if not main:
                    continue
            elif isinstance(entry, str):
                cls = tracker_class(entry)
                # A class registered with Accelerate runs where Accelerate runs it: on the main
                # process only.
                foreign = not issubclass(cls, GeneralTracker)
                if (foreign or cls.main_process_only) and not main:
                    continue
            elif entry.main_process_only and not main:
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
