"""Helpers for nested lists, tuples, namedtuples and dicts of tensors (batches, outputs, metrics)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..utils.tree import map_structure, rebuild
from ..utils.validation import invalid
from .debug import brief

_HALF = (torch.float16, torch.bfloat16)


def is_torch_tensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a ``torch.Tensor`` (the default ``test_type`` of the helpers here).

    Example:
        >>> is_torch_tensor(torch.ones(1)), is_torch_tensor([1.0])
        (True, False)
    """
    return isinstance(tensor, torch.Tensor)


def _check_callable(name: str, value: Any) -> None:
    if not callable(value):
        raise invalid(name, value, "expected a callable", TypeError)


def honor_type(obj: Any, generator: Any) -> Any:
    """Build an object of the type of ``obj`` (list, tuple, namedtuple ...) from ``generator``.

    Args:
        obj: the list, tuple, namedtuple or mapping whose type the result takes.
        generator: an iterable of the items (of key-value pairs for a mapping).

    Returns:
        ``type(obj)`` holding the items; namedtuples get them as fields.

    Example:
        >>> Point = namedtuple("Point", "x y")
        >>> honor_type(Point(1, 2), (v * 10 for v in Point(1, 2)))
        Point(x=10, y=20)

    Note:
        A ``defaultdict`` keeps its ``default_factory`` (Accelerate only handles sequences).
    """
    if not isinstance(obj, (list, tuple, Mapping)):
        raise invalid(
            "obj",
            brief(obj),
            "expected a list, tuple, namedtuple or mapping to take the type of",
            TypeError,
        )
    return rebuild(obj, generator)


def _unsupported(
    func: Callable[..., Any], test_type: Callable[[Any], bool]
) -> Callable[[Any], Any]:
    def reject(x: Any) -> Any:
        raise TypeError(
            f"data contains {x!r} ({type(x).__name__}), which is not valid for "
            f"{getattr(func, '__name__', func)!r}: only nested lists, tuples and dicts of "
            f"objects accepted by {getattr(test_type, '__name__', test_type)!r} are allowed."
        )

    return reject


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = is_torch_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """Apply ``func`` to every leaf of a nested structure that passes ``test_type``.

    Lists, tuples, namedtuples and mappings are walked and rebuilt with their own type.

    Args:
        func: called as ``func(leaf, *args, **kwargs)``.
        data: the nested structure (or a single leaf).
        *args: extra positional arguments for ``func``.
        test_type: selects the leaves ``func`` applies to (default: torch tensors).
        error_on_other_type: raise a TypeError for any other leaf instead of keeping it.
        **kwargs: extra keyword arguments for ``func``.

    Returns:
        The same structure with ``func``'s results in place of the selected leaves.

    Raises:
        TypeError: ``func`` or ``test_type`` is not callable, or (with
            ``error_on_other_type``) a leaf fails ``test_type``.

    Example:
        >>> recursively_apply(lambda t: t * 2, {"a": torch.ones(2), "b": [torch.zeros(1), "x"]})
        {'a': tensor([2., 2.]), 'b': [tensor([0.]), 'x']}

    Note:
        Unlike Accelerate, a ``defaultdict`` comes back as a ``defaultdict`` with the same
        ``default_factory``.
    """
    _check_callable("func", func)
    _check_callable("test_type", test_type)
    if not isinstance(error_on_other_type, bool):
        raise invalid(
            "error_on_other_type", error_on_other_type, "expected True or False", TypeError
        )
    apply = functools.partial(func, *args, **kwargs) if args or kwargs else func
    other = _unsupported(func, test_type) if error_on_other_type else None
    return map_structure(apply, data, test_type, other)


def _movable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) or hasattr(x, "to")


def send_to_device(
    tensor: Any,
    device: str | int | torch.device,
    non_blocking: bool = False,
    skip_keys: str | list[str] | tuple[str, ...] | set[str] | None = None,
) -> Any:
    """Move every tensor (and every object with a ``.to()`` method) of a nested structure.

    Args:
        tensor: the data: a tensor, an object with ``.to()``, or nested containers of them.
        device: where to move them (``"cuda:0"``, ``0``, ``torch.device("cpu")`` ...).
        non_blocking: asynchronous copy where possible (pinned memory to a GPU).
        skip_keys: dict keys whose values stay where they are, at any depth.

    Returns:
        The same structure with moved tensors; tensors already there are returned as they are.

    Example:
        >>> batch = send_to_device({"x": torch.ones(2), "ids": [1, 2]}, "cpu")
    """
    if not isinstance(device, (str, int, torch.device)) or isinstance(device, bool):
        raise invalid("device", device, "expected a str, int or torch.device", TypeError)
    if not isinstance(non_blocking, bool):
        raise invalid("non_blocking", non_blocking, "expected True or False", TypeError)
    if isinstance(skip_keys, str):
        skip: Any = (skip_keys,)
    elif skip_keys is None:
        skip = ()
    elif isinstance(skip_keys, (list, tuple, set, frozenset)):
        skip = frozenset(skip_keys)
    else:
        raise invalid("skip_keys", skip_keys, "expected a str, a list of str or None", TypeError)

    def move(x: Any) -> Any:
        try:
            return x.to(device, non_blocking=non_blocking)
        except TypeError:  # a .to() without non_blocking
            return x.to(device)

    return map_structure(move, tensor, _movable, leaf_first=True, skip_keys=skip)


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """Concatenate, leaf by leaf, a list of nested structures that share one layout.

    Args:
        data: a non-empty list or tuple of structures (tensors, or lists, tuples and dicts of
            them), each laid out like the first.
        dim: the dimension to concatenate along.

    Returns:
        One structure like ``data[0]`` whose leaves are ``torch.cat`` of the matching leaves. A
        leaf that is not a tensor is returned as it is when ``data`` holds one structure only
        (as in Accelerate); with several it is a TypeError.

    Example:
        >>> concatenate([{"a": torch.ones(2)}, {"a": torch.zeros(1)}])
        {'a': tensor([1., 1., 0.])}

    Note:
        A ``defaultdict`` comes back as a ``defaultdict`` (Accelerate fails on one).
    """
    if not isinstance(data, (list, tuple)) or not data:
        raise invalid("data", brief(data), "expected a non-empty list of structures", TypeError)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise invalid("dim", dim, "expected an int", TypeError)
    first = data[0]
    if isinstance(first, (list, tuple)):
        return rebuild(first, [concatenate([d[i] for d in data], dim) for i in range(len(first))])
    if isinstance(first, Mapping):
        return rebuild(first, {k: concatenate([d[k] for d in data], dim) for k in first})
    if not isinstance(first, torch.Tensor):
        if len(data) == 1:  # a single batch comes back as it is, whatever it holds
            return first
        raise invalid(
            "data", brief(first), "can only concatenate tensors (in nested containers)", TypeError
        )
    return torch.cat(data, dim=dim)


def find_batch_size(data: Any) -> int:
    """The size of the first dimension of the first tensor found in ``data`` (depth first).

    Raises:
        ValueError: an empty container, or a 0-d tensor, comes first.
        TypeError: the first leaf is not a tensor.

    Note:
        A 0-d tensor is a ValueError that says so (an IndexError in Accelerate).

    Example:
        >>> find_batch_size({"input_ids": torch.zeros(8, 128), "labels": torch.zeros(8)})
        8
    """
    while isinstance(data, (list, tuple, Mapping)):
        if len(data) == 0:
            raise invalid("data", brief(data), "cannot find a batch size in an empty container")
        data = next(iter(data.values())) if isinstance(data, Mapping) else data[0]
    if not isinstance(data, torch.Tensor):
        raise invalid("data", brief(data), "can only find the batch size of tensors", TypeError)
    if data.ndim == 0:
        raise invalid("data", brief(data), "a 0-d tensor has no batch dimension")
    return data.shape[0]


def _to_list(tensor: torch.Tensor) -> Any:
    return tensor.detach().cpu().tolist()


def listify(data: Any) -> Any:
    """Turn every tensor of a nested structure into (nested) Python lists or numbers.

    Example:
        >>> listify({"loss": torch.tensor(0.5), "ids": torch.tensor([1, 2])})
        {'loss': 0.5, 'ids': [1, 2]}
    """
    return map_structure(_to_list, data, is_torch_tensor)


def _is_half(x: Any) -> bool:
    return getattr(x, "dtype", None) in _HALF and hasattr(x, "float")


def convert_to_fp32(tensor: Any) -> Any:
    """Cast every float16 and bfloat16 tensor of a nested structure to float32; keep the rest.

    Example:
        >>> convert_to_fp32([torch.ones(1, dtype=torch.float16), torch.ones(1, dtype=torch.int64)])
        [tensor([1.]), tensor([1])]
    """
    return map_structure(lambda t: t.float(), tensor, _is_half)
