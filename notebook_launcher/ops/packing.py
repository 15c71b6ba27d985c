"""How the collectives move nested structures: as a flat list of tensors, small ones packed.

A structure goes out as its list of tensors (:func:`tensor_leaves`) and comes back rebuilt
around the results (:func:`put_back`). :func:`plan` decides which tensors travel alone and which
small ones share one message, so a dict of ten metrics costs one collective, not ten.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.tree import leaves, refill

# Tensors up to this size are packed with the others of their dtype and device into one message.
SMALL_BYTES = 64 * 1024


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def tensor_leaves(data: Any, operation: str) -> list[torch.Tensor]:
    """The tensors of ``data`` in order; any other leaf is a TypeError naming it."""
    if isinstance(data, torch.Tensor):
        return [data]

    def reject(x: Any) -> None:
        raise TypeError(
            f"tensor contains {x!r} ({type(x).__name__}), which is not valid: {operation}() "
            "accepts a tensor or nested lists, tuples and dicts of tensors"
        )

    return leaves(data, _is_tensor, reject)


def put_back(data: Any, results: list[Any]) -> Any:
    """``data`` rebuilt with ``results`` in place of its tensors (in :func:`tensor_leaves` order)."""
    return results[0] if isinstance(data, torch.Tensor) else refill(data, results, _is_tensor)


def plan(tensors: list[torch.Tensor]) -> tuple[list[int], list[list[int]]]:
    """Indices of the tensors sent alone, and groups of small ones of one dtype/device sent packed.

    Every process computes the same plan from the same shapes, so the collectives line up.
    """
    if len(tensors) == 1:
        return [0], []
    alone: list[int] = []
    small: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, t in enumerate(tensors):
        if t.numel() * t.element_size() <= SMALL_BYTES:
            small.setdefault((t.dtype, t.device), []).append(i)
        else:
            alone.append(i)
    packs = [group for group in small.values() if len(group) > 1]
    alone += [group[0] for group in small.values() if len(group) == 1]
    return alone, packs


def pack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One new flat tensor holding ``tensors`` one after the other (all of one dtype)."""
    return torch.cat([t if t.ndim == 1 else t.reshape(-1) for t in tensors])


def unpack(flat: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Views of ``flat`` shaped like ``tensors``, one after the other."""
    parts = torch.split(flat, [t.numel() for t in tensors])
    return [
        part if t.ndim == 1 else part.view(t.shape) for part, t in zip(parts, tensors, strict=True)
    ]
