"""Spawn: fresh interpreters; the function and its arguments travel by value with cloudpickle."""

from __future__ import annotations

from typing import Any

import cloudpickle

from .base import Launcher


class SpawnLauncher(Launcher):
    start_method = "spawn"

    def payload(self, function: Any, args: tuple) -> Any:
        # By value, so functions, lambdas and classes defined in notebook cells need no importable
        # module. Picklability was checked (and explained) by the preflight checks.
        return cloudpickle.dumps((function, args))
