"""Everything that runs in the kernel to start and watch worker processes."""

from .api import debug_launcher, launch, notebook_launcher
from .errors import (
    LaunchError,
    LaunchTimeoutError,
    NodesMissingError,
    PreflightError,
    RemoteNodeFailedError,
    WorkerFailure,
    WorkersFailedError,
    WorkerStalledError,
)
from .result import LaunchResult

__all__ = [
    "LaunchError",
    "LaunchResult",
    "LaunchTimeoutError",
    "NodesMissingError",
    "PreflightError",
    "RemoteNodeFailedError",
    "WorkerFailure",
    "WorkerStalledError",
    "WorkersFailedError",
    "debug_launcher",
    "launch",
    "notebook_launcher",
]
