"""Give each process its contiguous share of a list, tuple, tensor, dataset or dict of those."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..utils.tree import rebuild
from ..utils.validation import check_bool, check_int, short_repr

ALLOWED = (
    "expected a list, a tuple, a torch.Tensor with at least one dimension, a dataset with "
    "select() (datasets.Dataset), or a dict whose values are those (all of one length)"
)


def _is_dataset(value: Any) -> bool:
    return (
        hasattr(value, "select")
        and hasattr(value, "__len__")
        and not isinstance(value, (list, tuple, torch.Tensor))
    )


def _length(value: Any, path: str) -> int:
    """The number of items of a leaf, or the common number of items of a dict's leaves."""
    if isinstance(value, Mapping):
        lengths = {key: _length(item, f"{path}[{key!r}]") for key, item in value.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{path} is not valid: every value of a dict must have the same length, got "
                + ", ".join(f"{key!r}: {n}" for key, n in lengths.items())
            )
        return next(iter(lengths.values()), 0)
    if isinstance(value, (list, tuple)) or _is_dataset(value):
        return len(value)
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.shape[0]
    raise TypeError(f"{path}={short_repr(value)} is not valid: {ALLOWED}.")


def _take(value: Any, start: int, end: int, target: int | None) -> Any:
    """Items ``start:end`` of a leaf, padded to ``target`` items by repeating the last item."""
    if isinstance(value, Mapping):
        return rebuild(value, {key: _take(item, start, end, target) for key, item in value.items()})
    total = len(value)
    missing = 0 if target is None or total == 0 else target - (min(end, total) - start)
    if _is_dataset(value):
        return value.select(list(range(start, min(end, total))) + [total - 1] * missing)
    part = value[start:end]
    if missing <= 0:
        return part
    if isinstance(value, torch.Tensor):
        last = value[-1:]
        return torch.cat([part, last.expand(missing, *last.shape[1:])])
    return part + type(part)([value[-1]] * missing)


def split_between(
    inputs: Any, num_processes: int, process_index: int, apply_padding: bool = False
) -> Any:
    """The share of ``inputs`` that process ``process_index`` of ``num_processes`` gets.

    Shares are contiguous and differ in size by at most one, the first processes taking the
    extra items: 5 items over 2 processes give ``[0:3]`` and ``[3:5]``. With ``apply_padding``
    every share has ``ceil(len / num_processes)`` items, the short ones repeating the last item
    of ``inputs``; an empty input stays empty. Lists stay lists, tuples tuples, tensors tensors
    (on their own device), dicts are rebuilt with each value split.

    With one process ``inputs`` itself comes back, whatever its type (a string too), as in
    Accelerate.

    Raises:
        TypeError: ``inputs`` is of another type (with several processes), naming it. A str
            is refused too: Accelerate would give every process the whole string.
        ValueError: the values of a dict differ in length.
    """
    check_bool("apply_padding", apply_padding)
    check_int("num_processes", num_processes, 1)
    check_int("process_index", process_index, 0)
    if num_processes == 1:  # as in Accelerate: whatever it is, the one process gets it whole
        return inputs
    length = _length(inputs, "inputs")
    per_process, extras = divmod(length, num_processes)
    start = process_index * per_process + min(process_index, extras)
    end = start + per_process + (1 if process_index < extras else 0)
    target = per_process + (1 if extras else 0) if apply_padding else None
    return _take(inputs, start, end, target)
