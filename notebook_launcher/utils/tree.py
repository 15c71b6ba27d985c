"""Walk nested lists, tuples, namedtuples and dicts, rebuilding each container with its own type."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any


def rebuild(container: Any, items: Any) -> Any:
    """A container of the same type as ``container`` holding ``items``."""
    if isinstance(container, tuple) and hasattr(container, "_fields"):  # namedtuple
        return type(container)(*items)
    if isinstance(container, defaultdict):
        return type(container)(container.default_factory, items)
    return type(container)(items)


def map_structure(func: Callable[[Any], Any], data: Any, leaf: Callable[[Any], bool]) -> Any:
    """Apply ``func`` to every leaf of ``data`` for which ``leaf(x)`` is true; keep the rest."""
    if isinstance(data, (list, tuple)):
        return rebuild(data, [map_structure(func, item, leaf) for item in data])
    if isinstance(data, Mapping):
        return rebuild(data, {key: map_structure(func, value, leaf) for key, value in data.items()})
    return func(data) if leaf(data) else data


def to_cpu(data: Any) -> Any:
    """``data`` with every torch tensor inside it moved to the CPU (and detached)."""
    import torch

    return map_structure(lambda t: t.detach().cpu(), data, lambda x: isinstance(x, torch.Tensor))
