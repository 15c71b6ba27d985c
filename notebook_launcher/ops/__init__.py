"""Operations on nested structures of tensors and across the processes of a job.

The names and signatures are those Accelerate documents in ``accelerate.utils``; each works in a
single process (no communication) and in a launched job. See each docstring's ``Note:`` for where
behaviour deliberately differs.
"""

from __future__ import annotations

from .collectives import (
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    wait_for_everyone,
)
from .debug import DistributedOperationException
from .modeling import compute_module_sizes, extract_model_from_parallel, get_max_layer_size
from .random import set_seed, synchronize_rng_state, synchronize_rng_states
from .saving import offload_state_dict, save
from .structures import (
    concatenate,
    convert_to_fp32,
    find_batch_size,
    honor_type,
    is_torch_tensor,
    listify,
    recursively_apply,
    send_to_device,
)

__all__ = [
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
]
