"""Launch distributed PyTorch from a notebook cell, with the worker-side API of Accelerate."""

from .kwargs import (
    AutocastKwargs,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from .launch import (
    LaunchError,
    LaunchResult,
    LaunchTimeoutError,
    PreflightError,
    WorkerFailure,
    WorkersFailedError,
    WorkerStalledError,
    debug_launcher,
    notebook_launcher,
)
from .state import DistributedType, PartialState

__version__ = "0.1.0"

__all__ = [
    "AutocastKwargs",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "GradScalerKwargs",
    "InitProcessGroupKwargs",
    "LaunchError",
    "LaunchResult",
    "LaunchTimeoutError",
    "PartialState",
    "PreflightError",
    "ProfileKwargs",
    "WorkerFailure",
    "WorkerStalledError",
    "WorkersFailedError",
    "debug_launcher",
    "notebook_launcher",
]
