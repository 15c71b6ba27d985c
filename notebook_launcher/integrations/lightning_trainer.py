"""A Lightning ``Trainer`` logger that feeds the launching notebook's panels.

Example:
    >>> from notebook_launcher.integrations.lightning_trainer import NotebookTrainerLogger
    >>> trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp",
    ...                   logger=[CSVLogger("logs"), NotebookTrainerLogger()])
    >>> trainer.fit(model)  # every self.log(...) charted per rank

In a worker started by ``notebook_launcher`` every ``Trainer`` gets one after its own loggers
(see :mod:`notebook_launcher.integrations`); outside a launched worker it does nothing.
"""

from __future__ import annotations

import importlib
from argparse import Namespace
from typing import Any

from lightning.pytorch.loggers import Logger

from .. import live as tracking
from .values import check_mapping, numbers_of, step_of

# Lightning adds the epoch to what it logs; the panel's step axis already says where it was.
_NOT_CHARTED = ("epoch",)


class _TrainerLogger:
    """What ``self.log``/``self.log_dict`` record, charted per rank and their mean.

    Lightning calls the loggers on every rank; each rank charts its own values (reduced ones
    where ``sync_dist=True``). Values that are not numbers are left out. ``finalize(status)``
    shows the status ("success", "failed" ...) in the rank's row.

    The logger has no directory: placed first (a ``Trainer(logger=False)``), it leaves where
    Lightning writes checkpoints and profiles where it would be without a logger
    (``default_root_dir``).
    """

    def __init__(self, root_dir: str | None = None) -> None:
        if root_dir is not None and not isinstance(root_dir, str):
            raise TypeError(f"root_dir={root_dir!r} is not valid: expected a str or None")
        super().__init__()
        self._root_dir = root_dir
        self.hyperparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return ""  # joined into checkpoint paths: adds no folder

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str | None:
        return self._root_dir

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        values = numbers_of(check_mapping("metrics", metrics), lambda name: name in _NOT_CHARTED)
        if values:
            tracking.log(values, step=step_of(step))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Keep the hyperparameters (in ``hyperparams``); they are not charted."""
        if isinstance(params, Namespace):
            params = vars(params)
        if params is None:
            return
        self.hyperparams.update(check_mapping("params", dict(params)))

    def finalize(self, status: str) -> None:
        if not isinstance(status, str):
            raise TypeError(f"status={status!r} is not valid: expected a str")
        tracking.set_status(status)


class NotebookTrainerLogger(_TrainerLogger, Logger):
    __doc__ = _TrainerLogger.__doc__


_classes: dict[type, type] = {Logger: NotebookTrainerLogger}


def logger_class(trainer_module: Any) -> type:
    """The logger class for the Lightning package ``trainer_module`` belongs to
    (``lightning.pytorch`` or the standalone ``pytorch_lightning``)."""
    package = trainer_module.__name__.split(".trainer", 1)[0]
    base = importlib.import_module(package + ".loggers").Logger
    if base not in _classes:
        _classes[base] = type("NotebookTrainerLogger", (_TrainerLogger, base), {})
    return _classes[base]


__all__ = ["NotebookTrainerLogger", "logger_class"]
