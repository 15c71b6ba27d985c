"""Operations on whole batches: device moves, batch size, concatenation, slicing, shape specs.

A batch is any nesting of lists, tuples (named or not) and mappings around tensors and other
values. A list of plain values (strings, numbers, None ...) whose length is the batch size is a
*per-sample field*, such as the list of strings ``default_collate`` makes from string samples:
it is sliced and concatenated along with the tensors. Every other non-tensor value is kept as it
is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..utils.tree import map_structure, rebuild

_CONTAINERS = (list, tuple, Mapping, torch.Tensor)


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one tensor of a batch, sent ahead so that receivers can allocate it."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def send_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor moved to ``device``; other values are kept.

    Plain lists, tuples and dicts are rebuilt directly (this runs once per batch); other
    containers keep their type through :func:`~notebook_launcher.utils.tree.rebuild`.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True) if non_blocking else batch.to(device)
    kind = type(batch)
    if kind is list or kind is tuple:
        moved = [send_to_device(item, device, non_blocking) for item in batch]
        return moved if kind is list else tuple(moved)
    if kind is dict:
        return {k: send_to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return rebuild(batch, [send_to_device(item, device, non_blocking) for item in batch])
    if isinstance(batch, Mapping):
        return rebuild(
            batch, {k: send_to_device(v, device, non_blocking) for k, v in batch.items()}
        )
    return batch


def _is_samples(value: Any, size: int | None) -> bool:
    """Whether ``value`` is a per-sample field of a batch of ``size`` samples."""
    return (
        size is not None
        and type(value) is list
        and len(value) == size
        and not any(isinstance(item, _CONTAINERS) for item in value)
    )


def find_batch_size(batch: Any) -> int | None:
    """The first dimension of the first tensor met depth-first (None if there is no tensor)."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() > 0 else None
    children = batch.values() if isinstance(batch, Mapping) else batch
    if isinstance(batch, (list, tuple, Mapping)):
        for child in children:
            size = find_batch_size(child)
            if size is not None:
                return size
    return None


def _walk(batch: Any, size: int | None, tensor: Callable, samples: Callable) -> Any:
    """Rebuild ``batch`` with ``tensor`` applied to tensors and ``samples`` to per-sample fields."""
    if isinstance(batch, torch.Tensor):
        return tensor(batch)
    if _is_samples(batch, size):
        return samples(batch)
    if isinstance(batch, (list, tuple)):
        return rebuild(batch, [_walk(item, size, tensor, samples) for item in batch])
    if isinstance(batch, Mapping):
        return rebuild(batch, {k: _walk(v, size, tensor, samples) for k, v in batch.items()})
    return batch


def slice_tensors(
    data: Any,
    tensor_slice: slice,
    process_index: int | None = None,
    num_processes: int | None = None,
) -> Any:
    """The samples ``tensor_slice`` of a batch: tensors (1-D and up) and per-sample fields.

    The default ``slice_fn`` of :class:`~notebook_launcher.data.DataLoaderDispatcher`;
    ``process_index`` and ``num_processes`` are accepted for custom functions of the same shape.
    """
    size = find_batch_size(data)
    return _walk(
        data,
        size,
        lambda t: t[tensor_slice] if t.dim() > 0 else t,
        lambda items: items[tensor_slice],
    )


def concatenate(batches: Sequence[Any]) -> Any:
    """One batch holding the samples of ``batches`` in order (same structure in each).

    Raises:
        RuntimeError: tensors that cannot be joined (different shapes beyond the first dim).
    """
    if len(batches) == 1:
        return batches[0]
    return _join(list(batches), [find_batch_size(b) for b in batches])


def _join(parts: list[Any], sizes: list[int | None]) -> Any:
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts, dim=0)
    if all(_is_samples(p, s) for p, s in zip(parts, sizes, strict=True)):
        return [item for p in parts for item in p]
    if isinstance(first, (list, tuple)):
        return rebuild(first, [_join(list(group), sizes) for group in zip(*parts, strict=True)])
    if isinstance(first, Mapping):
        return rebuild(first, {k: _join([p[k] for p in parts], sizes) for k in first})
    return first


def describe(batch: Any) -> Any:
    """``batch`` with every tensor replaced by its :class:`TensorSpec` (the rest kept)."""
    return map_structure(
        lambda t: TensorSpec(tuple(t.shape), t.dtype), batch, lambda x: isinstance(x, torch.Tensor)
    )


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """The tensors of ``batch``, depth-first, in the order :func:`describe` meets them."""
    found: list[torch.Tensor] = []
    map_structure(found.append, batch, lambda x: isinstance(x, torch.Tensor))
    return found


def materialize(spec: Any, device: torch.device) -> Any:
    """A batch shaped like ``spec`` with empty tensors on ``device`` in place of the specs."""
    return map_structure(
        lambda s: torch.empty(s.shape, dtype=s.dtype, device=device),
        spec,
        lambda x: isinstance(x, TensorSpec),
    )
