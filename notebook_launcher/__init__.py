"""Launch distributed PyTorch from a notebook cell, with the worker-side API of Accelerate.

Each public name is imported from its module on first use (``_EXPORTS``), so a worker process
loads the parts its function uses and nothing of the kernel side: a rank on a cluster node starts
faster, and ``import notebook_launcher`` costs little until something is asked of it.
"""

import logging as _logging
import sys as _sys

from .utils import cuda_fork as _cuda_fork
from .utils.lazy import lazy_exports as _lazy_exports

__version__ = "0.1.0"


# Each public name, by the module it lives in (imported on first use).
_EXPORTS = {
    ".accelerator": (
        "AcceleratedOptimizer",
        "AcceleratedScheduler",
        "Accelerator",
        "DataLoaderConfiguration",
        "GeneralTracker",
        "ProjectConfiguration",
    ),
    ".backends.config_file": (
        "load_config",
        "write_basic_config",
    ),
    ".data": (
        "BatchSamplerShard",
        "DataLoaderDispatcher",
        "DataLoaderShard",
        "IterableDatasetShard",
        "SeedableRandomSampler",
        "SkipBatchSampler",
        "SkipDataLoader",
        "prepare_data_loader",
        "skip_first_batches",
    ),
    ".launch": (
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
        "RemoteNodeFailedError",
        "Session",
        "SessionBrokenError",
        "SessionClosedError",
        "SlurmCluster",
        "StdinUnavailableError",
        "WorkerFailure",
        "WorkersFailedError",
        "WorkersNotStartedError",
        "WorkerStalledError",
        "debug_launcher",
        "launch_in_background",
        "notebook_launcher",
        "plan_launch",
    ),
    ".live": (
        "Progress",
        "log",
        "progress",
        "set_status",
    ),
    ".ops": (
        "DistributedOperationException",
        "broadcast",
        "broadcast_object_list",
        "compute_module_sizes",
        "concatenate",
        "convert_to_fp32",
        "extract_model_from_parallel",
        "find_batch_size",
        "gather",
        "gather_object",
        "get_max_layer_size",
        "honor_type",
        "is_torch_tensor",
        "listify",
        "offload_state_dict",
        "pad_across_processes",
        "recursively_apply",
        "reduce",
        "save",
        "send_to_device",
        "set_seed",
        "synchronize_rng_state",
        "synchronize_rng_states",
        "wait_for_everyone",
    ),
    ".panel": ("LaunchPanel",),
    ".state": (
        "AcceleratorState",
        "DistributedType",
        "GradientState",
        "LoggerType",
        "PartialState",
        "PrecisionType",
        "RNGType",
    ),
    ".utils.batch_size": ("find_executable_batch_size",),
    ".utils.dataclasses": (
        "GradientAccumulationPlugin",
        "KwargsHandler",
    ),
    ".utils.environment": (
        "is_bf16_available",
        "is_cuda_available",
        "is_mps_available",
        "is_torch_xla_available",
        "is_tpu_available",
    ),
    ".utils.kwargs": (
        "AutocastKwargs",
        "DDPCommunicationHookType",
        "DistributedDataParallelKwargs",
        "FP8RecipeKwargs",
        "GradScalerKwargs",
        "InitProcessGroupKwargs",
        "ProfileKwargs",
    ),
    ".utils.memory": ("get_max_memory",),
    ".utils.versions": ("is_torch_version",),
}
_WHERE, __getattr__, __dir__ = _lazy_exports(globals(), _EXPORTS)


def load_ipython_extension(ipython) -> None:
    """``%load_ext notebook_launcher``: the ``%distributed`` and ``%%distributed`` magics (see
    :mod:`notebook_launcher.magics`)."""
    from .magics import load_ipython_extension as load

    load(ipython)


__all__ = sorted([*_WHERE, "load_ipython_extension"])


def _offer_in_utils() -> None:
    """``notebook_launcher.utils`` offers what ``accelerate.utils`` does; the names that live in
    other parts (the collectives, the config file) are added to it here, so that ``utils``
    itself imports no other part of the package."""
    from . import ops, utils
    from .backends.config_file import load_config, write_basic_config

    names = {name: getattr(ops, name) for name in ops.__all__}
    names.update(load_config=load_config, write_basic_config=write_basic_config)
    vars(utils).update(names)
    utils.__all__ = sorted({*utils.__all__, *names})


_offer_in_utils()

# The package logs restarts, port fallbacks and teardowns to the "notebook_launcher" logger;
# silent unless the application configures logging (logging.basicConfig(level=logging.INFO)).
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

# In a Jupyter kernel, what the first launch would import starts now, in the background (the
# check is cheap where no kernel runs: a worker or a script imports nothing for it).
if "ipykernel" in _sys.modules:
    from .launch.processes import warmup as _warmup

    if _warmup.in_interactive_kernel():
        _warmup.start_in_background()

# From here on, the first call that initialises CUDA through torch is remembered, so that a launch
# refused because of it can name the cell and line (nothing is initialised by this).
_cuda_fork.install_culprit_recorder()
