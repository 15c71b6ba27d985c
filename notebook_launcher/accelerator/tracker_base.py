"""The base class of every tracker the Accelerator starts."""

from __future__ import annotations

from typing import Any


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
