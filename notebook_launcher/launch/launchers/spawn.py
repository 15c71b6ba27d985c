"""Spawn: fresh interpreters; the function and its arguments travel by value with cloudpickle."""

from __future__ import annotations

from .base import Launcher


class SpawnLauncher(Launcher):
    start_method = "spawn"
    ships_by_value = True
    pickle_advice = (
        "With start_method='spawn' the function and every argument are sent to the workers by "
        "value; pass something picklable (or create the object inside the function), or use "
        "start_method='fork', which inherits them."
    )
