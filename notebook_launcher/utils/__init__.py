"""Small helpers shared by the kernel side and the worker side.

The Accelerate-style utility names (``is_bf16_available``, ``get_max_memory``, the enums and
kwargs handlers ...) are importable from here, as from ``accelerate.utils``; they load on first
use, so importing one submodule stays cheap. This folder imports no other part of the package:
the names ``accelerate.utils`` also offers from other parts (``gather``, ``reduce``,
``write_basic_config`` ...) are added here by the package's ``__init__``.
"""

from __future__ import annotations

from .lazy import lazy_exports

_EXPORTS = {
    ".environment": (
        "available_cpu_count",
        "is_bf16_available",
        "is_cuda_available",
        "is_mps_available",
        "is_torch_xla_available",
        "is_tpu_available",
        "parse_flag_from_env",
        "patch_environment",
        "str_to_bool",
    ),
    ".versions": ("compare_versions", "is_torch_version"),
    ".memory": ("convert_file_size_to_int", "get_max_memory"),
    ".batch_size": ("find_executable_batch_size", "release_memory"),
    ".dataclasses": ("GradientAccumulationPlugin", "KwargsHandler"),
    ".fp8": ("FP8RecipeKwargs",),
    ".profiling": ("ProfileKwargs",),
    ".enums": (
        "DDPCommunicationHookType",
        "DistributedType",
        "LoggerType",
        "PrecisionType",
        "RNGType",
    ),
    ".kwargs": (
        "AutocastKwargs",
        "DistributedDataParallelKwargs",
        "GradScalerKwargs",
        "InitProcessGroupKwargs",
    ),
}
_WHERE, __getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = sorted(_WHERE)
