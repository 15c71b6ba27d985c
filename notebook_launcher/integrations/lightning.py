"""A Lightning Fabric ``Logger`` that feeds the launching notebook's panels.

Example:
    >>> from notebook_launcher.integrations.lightning import NotebookLogger
    >>> fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp", loggers=[NotebookLogger()])
    >>> fabric.log("loss", loss)  # charted per rank

In a worker started by ``notebook_launcher`` every ``Fabric`` gets one after its own loggers
(see :mod:`notebook_launcher.integrations`); outside a launched worker it does nothing.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from lightning.fabric.loggers import Logger

from .. import live as tracking
from .values import check_mapping, numbers_of, step_of


class NotebookLogger(Logger):
    """Charts what ``fabric.log``/``fabric.log_dict`` record, per rank and their mean.

    Every rank logs its own values (Fabric calls loggers on every rank). Values that are not
    numbers are left out. ``finalize(status)`` shows the status ("success", "failed" ...) in the
    rank's row.

    Args:
        name: the logger's name (``fabric.logger.name``).
        version: its version, if any.
    """

    def __init__(self, name: str = "notebook", version: int | str | None = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name={name!r} is not valid: expected a str")
        if version is not None and not isinstance(version, (int, str)):
            raise TypeError(f"version={version!r} is not valid: expected an int, a str or None")
        super().__init__()
        self._name = name
        self._version = version
        self.hyperparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str | None:
        return self._version

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        values = numbers_of(check_mapping("metrics", metrics))
        if values:
            tracking.log(values, step=step_of(step))

    def log_hyperparams(
        self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any
    ) -> None:
        """Keep the hyperparameters (in ``hyperparams``); they are not charted."""
        if isinstance(params, Namespace):
            params = vars(params)
        self.hyperparams.update(check_mapping("params", params))

    def finalize(self, status: str) -> None:
        if not isinstance(status, str):
            raise TypeError(f"status={status!r} is not valid: expected a str")
        tracking.set_status(status)


__all__ = ["NotebookLogger"]
