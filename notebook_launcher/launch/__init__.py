"""Everything that runs in the kernel to start and watch worker processes."""

from .api import debug_launcher, notebook_launcher
from .background import LaunchHandle, launch_in_background
from .cluster import RayCluster
from .errors import (
    DeadlockError,
    LaunchBusyError,
    LaunchError,
    LaunchStoppedError,
    LaunchTimeoutError,
    NodesMissingError,
    PreflightError,
    RemoteNodeFailedError,
    SessionBrokenError,
    SessionClosedError,
    WorkerFailure,
    WorkersFailedError,
    WorkersNotStartedError,
    WorkerStalledError,
)
from .launchers.ray import ClusterError
from .plan import LaunchPlan
from .planner import plan_launch
from .result import LaunchResult
from .session import Session
from .settings import LaunchSettings

__all__ = [
    "Session",
    "SessionBrokenError",
    "SessionClosedError",
    "ClusterError",
    "DeadlockError",
    "LaunchBusyError",
    "LaunchError",
    "LaunchHandle",
    "LaunchPlan",
    "LaunchResult",
    "LaunchSettings",
    "LaunchStoppedError",
    "LaunchTimeoutError",
    "NodesMissingError",
    "PreflightError",
    "RayCluster",
    "RemoteNodeFailedError",
    "WorkerFailure",
    "WorkerStalledError",
    "WorkersFailedError",
    "WorkersNotStartedError",
    "debug_launcher",
    "launch_in_background",
    "notebook_launcher",
    "plan_launch",
]
