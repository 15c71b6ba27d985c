"""One launcher class per start method, and the registry the planner, the preflight checks and
the launch read. Adding a start method is one module here and one line in :data:`LAUNCHERS`."""

from __future__ import annotations

from .base import Launcher, WorkerHandle
from .fork import ForkLauncher
from .spawn import SpawnLauncher
from .xla import XlaLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    "fork": ForkLauncher,
    "spawn": SpawnLauncher,
    "xla": XlaLauncher,
}
# What ``start_method=`` accepts; the device may replace it (see ``Backend.start_methods``).
START_METHODS = tuple(name for name, cls in LAUNCHERS.items() if cls.selectable)
# Fork, or spawn where the kernel's state would break forked workers (see the preflight checks).
AUTO_START_METHOD = "auto"

__all__ = [
    "AUTO_START_METHOD",
    "LAUNCHERS",
    "START_METHODS",
    "ForkLauncher",
    "Launcher",
    "SpawnLauncher",
    "WorkerHandle",
    "XlaLauncher",
]
