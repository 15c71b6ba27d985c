"""Everything that runs in the kernel to start and watch worker processes."""

from .api import debug_launcher, notebook_launcher
from .background import LaunchHandle, launch_in_background
from .errors import (
    ClusterError,
    DeadlockError,
    DebuggerQuit,
    LaunchBusyError,
    LaunchError,
    LaunchStoppedError,
    LaunchTimeoutError,
    NodesMissingError,
    PreflightError,
    RemoteNodeFailedError,
    SessionBrokenError,
    SessionClosedError,
    StdinUnavailableError,
    WorkerFailure,
    WorkersFailedError,
    WorkersNotStartedError,
    WorkerStalledError,
)
from .launchers.ray.settings import RayCluster
from .launchers.slurm.settings import SlurmCluster
from .planning.plan import LaunchPlan
from .planning.planner import plan_launch
from .planning.settings import LaunchSettings
from .result import LaunchResult
from .session import Session

__all__ = [
    "Session",
    "SessionBrokenError",
    "SessionClosedError",
    "ClusterError",
    "DeadlockError",
    "DebuggerQuit",
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
    "SlurmCluster",
    "RemoteNodeFailedError",
    "StdinUnavailableError",
    "WorkerFailure",
    "WorkerStalledError",
    "WorkersFailedError",
    "WorkersNotStartedError",
    "debug_launcher",
    "launch_in_background",
    "notebook_launcher",
    "plan_launch",
]
