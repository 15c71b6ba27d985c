"""The few collectives the data loaders need, on the default process group, from process 0.

Kept private to the data package: random-state synchronisation and the batch broadcast of
:class:`~notebook_launcher.data.DataLoaderDispatcher`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..state.enums import RNGType
from ._batches import describe, materialize, tensors_of


def is_distributed() -> bool:
    """Whether a default process group of more than one process exists."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _transport_device(device: torch.device) -> torch.device:
    """Where a tensor must sit to be broadcast: gloo works on the host, other backends on device."""
    import torch.distributed as dist

    return torch.device("cpu") if dist.get_backend() == "gloo" else device


def broadcast_object(obj: Any) -> Any:
    """Process 0's ``obj`` on every process."""
    import torch.distributed as dist

    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def broadcast_state(state: torch.Tensor) -> torch.Tensor:
    """Process 0's copy of a random-state tensor (a CPU byte tensor), on every process."""
    import torch.distributed as dist

    from ..state import PartialState

    moved = state.to(_transport_device(PartialState().device))
    dist.broadcast(moved, src=0)
    return moved.cpu()


def broadcast_batch(batch: Any, device: torch.device) -> Any:
    """Process 0's ``batch`` (or None, meaning "no more batches") on every process, on ``device``.

    Process 0 sends the structure with tensor shapes first, then each tensor; the others
    allocate the tensors from the structure and receive into them. What ``batch`` is on the
    other processes does not matter.
    """
    import torch.distributed as dist

    spec = broadcast_object(describe(batch) if dist.get_rank() == 0 else None)
    if spec is None:
        return None
    if dist.get_rank() == 0:
        result = batch
    else:
        result = materialize(spec, device)
    for tensor in tensors_of(result):
        if tensor.is_contiguous() and tensor.device == _transport_device(device):
            dist.broadcast(tensor, src=0)
        else:
            moved = tensor.contiguous().to(_transport_device(device))
            dist.broadcast(moved, src=0)
            tensor.copy_(moved)
    return result


def _device_module(kind: RNGType) -> Any:
    """``torch.cuda``, ``torch.xpu`` ... for a device random generator, checked to be usable."""
    module = getattr(torch, kind.value, None)
    if module is None or not module.is_available():
        raise ValueError(
            f"rng_types contains {kind.value!r}, but no {kind.value} device is available in this "
            "process: leave it out of rng_types"
        )
    return module


def synchronize_rng_states(
    rng_types: Iterable[RNGType], generator: torch.Generator | None = None
) -> None:
    """Give every process the random states of process 0, for each kind in ``rng_types``.

    ``RNGType.GENERATOR`` synchronises ``generator`` (nothing happens without one). Does nothing
    outside a job of several processes.
    """
    if not is_distributed():
        return
    for kind in rng_types:
        if kind is RNGType.GENERATOR:
            if generator is not None:
                generator.set_state(broadcast_state(generator.get_state()))
        elif kind is RNGType.TORCH:
            torch.set_rng_state(broadcast_state(torch.get_rng_state()))
        elif kind is RNGType.XLA:
            _synchronize_xla()
        else:
            module = _device_module(kind)
            module.set_rng_state(broadcast_state(module.get_rng_state()))


def _synchronize_xla() -> None:
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:
        raise ValueError(
            "rng_types contains 'xla', but torch_xla is not installed: leave it out of rng_types"
        )
    seed = broadcast_object(xm.get_rng_state())
    xm.set_rng_state(seed)
