"""Launch distributed PyTorch from a notebook cell, with the worker-side API of Accelerate."""

import logging as _logging

from .accelerator import (
    AcceleratedOptimizer,
    AcceleratedScheduler,
    Accelerator,
    DataLoaderConfiguration,
    GeneralTracker,
    ProjectConfiguration,
)
from .backends.config_file import load_config, write_basic_config
from .data import (
    BatchSamplerShard,
    DataLoaderDispatcher,
    DataLoaderShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    SkipBatchSampler,
    SkipDataLoader,
    prepare_data_loader,
    skip_first_batches,
)
from .launch import (
    ClusterError,
    DeadlockError,
    LaunchBusyError,
    LaunchError,
    LaunchHandle,
    LaunchPlan,
    LaunchResult,
    LaunchSettings,
    LaunchStoppedError,
    LaunchTimeoutError,
    NodesMissingError,
    PreflightError,
    RayCluster,
    RemoteNodeFailedError,
    Session,
    SessionBrokenError,
    SessionClosedError,
    WorkerFailure,
    WorkersFailedError,
    WorkersNotStartedError,
    WorkerStalledError,
    debug_launcher,
    launch_in_background,
    notebook_launcher,
    plan_launch,
)
from .launch import warmup as _warmup
from .live import Progress, log, progress, set_status
from .ops import (
    DistributedOperationException,
    broadcast,
    broadcast_object_list,
    compute_module_sizes,
    concatenate,
    convert_to_fp32,
    extract_model_from_parallel,
    find_batch_size,
    gather,
    gather_object,
    get_max_layer_size,
    honor_type,
    is_torch_tensor,
    listify,
    offload_state_dict,
    pad_across_processes,
    recursively_apply,
    reduce,
    save,
    send_to_device,
    set_seed,
    synchronize_rng_state,
    synchronize_rng_states,
    wait_for_everyone,
)
from .panel import LaunchPanel
from .state import (
    AcceleratorState,
    DistributedType,
    GradientState,
    LoggerType,
    PartialState,
    PrecisionType,
    RNGType,
)
from .utils import cuda_fork as _cuda_fork
from .utils.batch_size import find_executable_batch_size
from .utils.dataclasses import GradientAccumulationPlugin, KwargsHandler
from .utils.environment import (
    is_bf16_available,
    is_cuda_available,
    is_mps_available,
    is_torch_xla_available,
    is_tpu_available,
)
from .utils.kwargs import (
    AutocastKwargs,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from .utils.memory import get_max_memory
from .utils.versions import is_torch_version

__version__ = "0.1.0"


def _offer_in_utils() -> None:
    """``notebook_launcher.utils`` offers what ``accelerate.utils`` does; the names that live in
    other parts (the collectives, the config file) are added to it here, so that ``utils``
    itself imports no other part of the package."""
    from . import ops, utils

    names = {name: getattr(ops, name) for name in ops.__all__}
    names.update(load_config=load_config, write_basic_config=write_basic_config)
    vars(utils).update(names)
    utils.__all__ = sorted({*utils.__all__, *names})


_offer_in_utils()

# The package logs restarts, port fallbacks and teardowns to the "notebook_launcher" logger;
# silent unless the application configures logging (logging.basicConfig(level=logging.INFO)).
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

# In a Jupyter kernel, what the first launch would import starts now, in the background.
if _warmup.in_interactive_kernel():
    _warmup.start_in_background()

__all__ = [
    "AcceleratedOptimizer",
    "AcceleratedScheduler",
    "Accelerator",
    "AcceleratorState",
    "AutocastKwargs",
    "BatchSamplerShard",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "DeadlockError",
    "DistributedDataParallelKwargs",
    "DistributedOperationException",
    "DistributedType",
    "FP8RecipeKwargs",
    "GeneralTracker",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "GradientState",
    "InitProcessGroupKwargs",
    "IterableDatasetShard",
    "KwargsHandler",
    "LaunchBusyError",
    "LaunchError",
    "LaunchHandle",
    "LaunchPanel",
    "LaunchPlan",
    "LaunchResult",
    "LaunchSettings",
    "RayCluster",
    "ClusterError",
    "LaunchStoppedError",
    "LaunchTimeoutError",
    "LoggerType",
    "NodesMissingError",
    "PartialState",
    "PrecisionType",
    "PreflightError",
    "ProfileKwargs",
    "Progress",
    "ProjectConfiguration",
    "RNGType",
    "RemoteNodeFailedError",
    "SeedableRandomSampler",
    "Session",
    "SessionBrokenError",
    "SessionClosedError",
    "SkipBatchSampler",
    "SkipDataLoader",
    "WorkerFailure",
    "WorkerStalledError",
    "WorkersFailedError",
    "WorkersNotStartedError",
    "broadcast",
    "broadcast_object_list",
    "compute_module_sizes",
    "concatenate",
    "convert_to_fp32",
    "debug_launcher",
    "extract_model_from_parallel",
    "find_batch_size",
    "find_executable_batch_size",
    "gather",
    "gather_object",
    "get_max_layer_size",
    "get_max_memory",
    "honor_type",
    "is_bf16_available",
    "is_cuda_available",
    "is_mps_available",
    "is_torch_tensor",
    "is_torch_version",
    "is_torch_xla_available",
    "is_tpu_available",
    "launch_in_background",
    "listify",
    "load_config",
    "load_ipython_extension",
    "log",
    "notebook_launcher",
    "offload_state_dict",
    "pad_across_processes",
    "plan_launch",
    "prepare_data_loader",
    "progress",
    "recursively_apply",
    "reduce",
    "save",
    "send_to_device",
    "set_seed",
    "set_status",
    "skip_first_batches",
    "synchronize_rng_state",
    "synchronize_rng_states",
    "wait_for_everyone",
    "write_basic_config",
]


def load_ipython_extension(ipython) -> None:
    """``%load_ext notebook_launcher``: the ``%distributed`` and ``%%distributed`` magics (see
    :mod:`notebook_launcher.magics`)."""
    from .magics import load_ipython_extension as load

    load(ipython)


# From here on, the first call that initialises CUDA through torch is remembered, so that a launch
# refused because of it can name the cell and line (nothing is initialised by this).
_cuda_fork.install_culprit_recorder()
