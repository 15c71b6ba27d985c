"""Walk nested lists, tuples, namedtuples and dicts, rebuilding each container with its own type.

This is the one traversal of nested data in the package: the launcher's :func:`to_cpu`, the
public :func:`notebook_launcher.ops.recursively_apply` and the collectives all go through
:func:`map_structure`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any


def rebuild(container: Any, items: Iterable[Any]) -> Any:
    """A container of the same type as ``container`` holding ``items``.

    Namedtuples get their fields positionally and a ``defaultdict`` keeps its
    ``default_factory``; every other type is called with ``items`` (a list for sequences, a dict
    or pairs for mappings).
    """
    if isinstance(container, tuple) and hasattr(container, "_fields"):  # namedtuple
        return type(container)(*items)
    if isinstance(container, defaultdict):
        return type(container)(container.default_factory, items)
    return type(container)(items)


def map_structure(
    func: Callable[[Any], Any],
    data: Any,
    leaf: Callable[[Any], bool],
    other: Callable[[Any], Any] | None = None,
    *,
    leaf_first: bool = False,
    skip_keys: Collection[Any] = (),
) -> Any:
    """Apply ``func`` to every leaf of ``data`` for which ``leaf(x)`` is true.

    Lists and tuples (namedtuples included) and mappings are walked and rebuilt with their own
    type (see :func:`rebuild`); anything else is a leaf.

    Args:
        func: called on each selected leaf; its result takes the leaf's place.
        data: the nested structure.
        leaf: selects the leaves ``func`` is applied to.
        other: called on the leaves ``leaf`` rejects (default: keep them as they are); may raise.
        leaf_first: test ``leaf`` before looking inside containers, so a container that ``leaf``
            accepts (e.g. a mapping with a ``.to()`` method) goes to ``func`` whole.
        skip_keys: mapping values stored under these keys are kept as they are, at every depth.
    """

    def walk(x: Any) -> Any:
        if leaf_first and leaf(x):
            return func(x)
        if isinstance(x, (list, tuple)):
            return rebuild(x, [walk(item) for item in x])
        if isinstance(x, Mapping):
            return rebuild(x, {k: v if k in skip_keys else walk(v) for k, v in x.items()})
        if not leaf_first and leaf(x):
            return func(x)
        return x if other is None else other(x)

    return walk(data)


def leaves(data: Any, leaf: Callable[[Any], bool], other: Callable[[Any], Any] | None = None):
    """The leaves of ``data`` that ``leaf`` accepts, in the order :func:`map_structure` visits."""
    found: list[Any] = []
    map_structure(found.append, data, leaf, other)
    return found


def refill(data: Any, values: Iterable[Any], leaf: Callable[[Any], bool]) -> Any:
    """``data`` with its leaves (those ``leaf`` accepts) replaced by ``values``, in order."""
    it = iter(values)
    return map_structure(lambda _: next(it), data, leaf)


def to_cpu(data: Any) -> Any:
    """``data`` with every torch tensor inside it moved to the CPU (and detached)."""
    import torch

    return map_structure(lambda t: t.detach().cpu(), data, lambda x: isinstance(x, torch.Tensor))
