"""What an Accelerator prepared, shared by the parts that work on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Prepared:
    """The objects an Accelerator prepared or registered, each list in the order it did."""

    models: list[Any] = field(default_factory=list)
    optimizers: list[Any] = field(default_factory=list)
    schedulers: list[Any] = field(default_factory=list)
    dataloaders: list[Any] = field(default_factory=list)
    custom_objects: list[Any] = field(default_factory=list)

    def clear(self) -> None:
        """Forget everything (the lists stay the same objects)."""
        for objects in (
            self.models,
            self.optimizers,
            self.schedulers,
            self.dataloaders,
            self.custom_objects,
        ):
            objects.clear()
