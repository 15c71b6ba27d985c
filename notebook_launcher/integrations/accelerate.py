"""An ``accelerate.tracking.GeneralTracker`` that feeds the launching notebook's panels.

Example:
    >>> from notebook_launcher.integrations.accelerate import NotebookTracker
    >>> accelerator = accelerate.Accelerator(log_with=[NotebookTracker()])
    >>> accelerator.init_trackers("my-run", config={"lr": 3e-4})
    >>> accelerator.log({"loss": loss.item()}, step=step)  # charted

In a worker started by ``notebook_launcher`` every ``accelerate.Accelerator`` gets one after
the trackers of its ``log_with`` (see :mod:`notebook_launcher.integrations`); it reports once
``init_trackers`` ran, as every Accelerate tracker does. Outside a launched worker it does
nothing. notebook_launcher's own ``Accelerator`` takes ``log_with="notebook"`` instead.
"""

from __future__ import annotations

from typing import Any

from accelerate.tracking import GeneralTracker

from .. import live as tracking
from .values import check_mapping, numbers_of, step_of


class NotebookTracker(GeneralTracker):
    """Charts what ``accelerator.log`` records (numbers; text and tables are left out).

    Accelerate's ``Accelerator.log`` runs on the main process only, so the charts show rank 0's
    values. ``init_trackers(..., config=...)`` keeps the configuration in ``config``.

    Args:
        run_name: the run's name (``init_trackers`` passes its ``project_name`` to built-in
            trackers; this one is created by you or by the launcher, so it has its own).
    """

    name = "notebook"
    requires_logging_directory = False
    main_process_only = False

    def __init__(self, run_name: str = "notebook") -> None:
        if not isinstance(run_name, str):
            raise TypeError(f"run_name={run_name!r} is not valid: expected a str")
        super().__init__()
        self.run_name = run_name
        self.config: dict[str, Any] = {}

    @property
    def tracker(self) -> None:
        """No underlying run object: the values go to the notebook."""
        return None

    def start(self) -> None:
        """Nothing to open: the values go to the launching notebook."""

    def store_init_configuration(self, values: dict) -> None:
        self.config = dict(check_mapping("values", values))

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        numbers = numbers_of(check_mapping("values", values))
        if numbers:
            tracking.log(numbers, step=step_of(step))


__all__ = ["NotebookTracker"]
