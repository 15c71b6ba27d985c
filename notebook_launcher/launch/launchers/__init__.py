"""One launcher class per start method, and the registry the planner, the preflight checks and
the launch read. Adding a start method is one module here and one line in :data:`LAUNCHERS`."""

from __future__ import annotations

from ..planning.plan import LaunchPlan
from .base import Launcher, WorkerHandle
from .fork import ForkLauncher
from .ray import RayLauncher
from .slurm import SlurmLauncher
from .spawn import SpawnLauncher
from .xla import XlaLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    "fork": ForkLauncher,
    "spawn": SpawnLauncher,
    "xla": XlaLauncher,
    "ray": RayLauncher,
    "slurm": SlurmLauncher,
}
# What ``start_method=`` accepts; the device may replace it (see ``Backend.start_methods``).
START_METHODS = tuple(name for name, cls in LAUNCHERS.items() if cls.selectable)
# Fork, or spawn where the kernel's state would break forked workers (see the preflight checks).
AUTO_START_METHOD = "auto"
CLUSTER_START_METHOD = "ray"  # a launch with cluster=: each rank in a Ray actor


def make_launcher(plan: LaunchPlan) -> Launcher:
    """The launcher that starts the workers of ``plan``."""
    return LAUNCHERS[plan.start_method].for_plan(plan)


__all__ = [
    "AUTO_START_METHOD",
    "CLUSTER_START_METHOD",
    "LAUNCHERS",
    "RayLauncher",
    "SlurmLauncher",
    "START_METHODS",
    "ForkLauncher",
    "Launcher",
    "SpawnLauncher",
    "WorkerHandle",
    "XlaLauncher",
    "make_launcher",
]
