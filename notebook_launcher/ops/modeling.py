"""Model helpers: unwrap parallel and compiled wrappers, measure modules."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Mapping
from itertools import chain
from typing import Any

import torch
from torch import nn

from ..utils.validation import check_bool, invalid
from .debug import brief

_PARALLEL = (nn.parallel.DistributedDataParallel, nn.DataParallel)


def _compiled_type() -> type | None:
    """``OptimizedModule``, if dynamo was ever imported (else nothing can be compiled)."""
    module = sys.modules.get("torch._dynamo.eval_frame")
    return getattr(module, "OptimizedModule", None)


def _peel(model: nn.Module, compiled: type | None) -> tuple[nn.Module, nn.Module | None]:
    """The module inside every DDP, DataParallel and compile wrapper; the outermost compile one."""
    outer_compiled = None
    while True:
        if compiled is not None and isinstance(model, compiled):
            outer_compiled = outer_compiled or model
            model = model._orig_mod
        elif isinstance(model, _PARALLEL):
            model = model.module
        else:
            return model, outer_compiled


def _drop_fp32_wrapper(model: nn.Module) -> None:
    """Undo the mixed-precision forward wrapper the Accelerator put on ``model``."""
    original = model.__dict__.pop("_original_forward", None)
    if original is None:
        return
    model.__dict__.pop("forward", None)
    class_forward = getattr(original, "__func__", None) is type(model).forward
    if not (class_forward and getattr(original, "__self__", None) is model):
        model.forward = original


def extract_model_from_parallel(
    model: nn.Module,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> nn.Module:
    """The user's model inside DistributedDataParallel, DataParallel and ``torch.compile`` wrappers.

    Args:
        model: the (possibly wrapped) model.
        keep_fp32_wrapper: keep the forward wrapper that mixed precision added (which casts
            outputs to float32); False restores the model's own forward.
        keep_torch_compile: return the compiled model (around the unwrapped one) if ``model``
            was compiled with ``torch.compile``; False returns the plain module.
        recursive: also replace wrapped submodules, at any depth, by the modules they wrap.

    Returns:
        The unwrapped module.

    Example:
        >>> ddp = torch.nn.parallel.DistributedDataParallel(net)
        >>> extract_model_from_parallel(ddp) is net
        True

    Note:
        Where a compiled model wraps a parallel wrapper, the result is a new compiled wrapper
        (same compile settings) around the inner module; Accelerate re-points the caller's
        compiled wrapper instead. A module compiled in place with ``module.compile()`` stays
        compiled. With ``recursive=True`` the wrapped submodules are replaced inside ``model``.
    """
    if not isinstance(model, nn.Module):
        raise invalid("model", brief(model), "expected a torch.nn.Module", TypeError)
    check_bool("keep_fp32_wrapper", keep_fp32_wrapper)
    check_bool("keep_torch_compile", keep_torch_compile)
    check_bool("recursive", recursive)
    compiled = _compiled_type()
    inner, outer_compiled = _peel(model, compiled)
    if recursive:
        for parent in inner.modules():
            for name, child in list(parent.named_children()):
                unwrapped = _peel(child, compiled)[0]
                if unwrapped is not child:
                    setattr(parent, name, unwrapped)
    if not keep_fp32_wrapper:
        _drop_fp32_wrapper(inner)
    if keep_torch_compile and outer_compiled is not None:
        if outer_compiled._orig_mod is inner:
            return outer_compiled
        return type(outer_compiled)(inner, outer_compiled.dynamo_ctx)
    return inner


def get_max_layer_size(
    modules: list[tuple[str, nn.Module]],
    module_sizes: dict[str, int],
    no_split_module_classes: list[str],
) -> tuple[int, list[str]]:
    """The size of the largest layer, a layer being a module not to be split across devices.

    A layer is a module without children, one whose class name is in
    ``no_split_module_classes``, or an entry that is not a module (a parameter or buffer, as
    ``infer_auto_device_map`` lists them); the other modules are searched through.

    Args:
        modules: ``(name, module)`` pairs to search, e.g. ``list(model.named_children())``.
        module_sizes: bytes per module name, as :func:`compute_module_sizes` gives them.
        no_split_module_classes: class names of modules that count as one layer (tested with
            ``in``, as Accelerate does).

    Returns:
        The largest size and the names of every layer of that size.

    Raises:
        TypeError: ``modules`` is not a list of pairs, or ``no_split_module_classes`` is not a
            container of names.
        KeyError: a layer has no size in ``module_sizes`` (the message names both).

    Example:
        >>> sizes = compute_module_sizes(model)
        >>> get_max_layer_size(list(model.named_children()), sizes, ["TransformerBlock"])
        (4196352, ['blocks.0', 'blocks.1'])

    Note:
        The children of a module named "" are named "child", as ``compute_module_sizes``
        names them; Accelerate names them ".child" and then finds no size for them.
    """
    if not isinstance(modules, (list, tuple)) or not all(
        isinstance(p, (tuple, list)) and len(p) == 2 for p in modules
    ):
        raise invalid(
            "modules", brief(modules), "expected a list of (name, module) pairs", TypeError
        )
    if not hasattr(module_sizes, "__getitem__"):
        raise invalid(
            "module_sizes", brief(module_sizes), "expected a dict of sizes by name", TypeError
        )
    if not hasattr(no_split_module_classes, "__contains__"):
        raise invalid(
            "no_split_module_classes",
            no_split_module_classes,
            "expected a list of class names",
            TypeError,
        )
    largest, names = 0, []
    stack = list(reversed(modules))
    while stack:
        name, module = stack.pop()
        children = list(module.named_children()) if isinstance(module, nn.Module) else []
        if children and type(module).__name__ not in no_split_module_classes:
            stack += [(f"{name}.{n}" if name != "" else n, c) for n, c in reversed(children)]
            continue
        try:
            size = module_sizes[name]
        except KeyError:
            raise KeyError(f"module_sizes has no size for {name!r}") from None
        if size > largest:
            largest, names = size, [name]
        elif size == largest:
            names.append(name)
    return largest, names


def _as_dtype(name: str, value: Any) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    found = getattr(torch, value.removeprefix("torch."), None) if isinstance(value, str) else None
    if not isinstance(found, torch.dtype):
        raise invalid(name, value, "expected a torch.dtype or its name, e.g. 'float16'", TypeError)
    return found


def compute_module_sizes(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    buffers_only: bool = False,
) -> defaultdict[str, int]:
    """Bytes taken by each submodule's parameters and buffers (the model itself under "").

    Args:
        model: the model.
        dtype: measure as if floating-point tensors were cast to this type (never larger than
            they are); integer and bool tensors keep their size.
        special_dtypes: per tensor name, a dtype that overrides ``dtype`` for that tensor.
        buffers_only: count the buffers alone.

    Returns:
        A ``defaultdict(int)`` from every module name (and tensor name) prefix to bytes.

    Example:
        >>> compute_module_sizes(torch.nn.Linear(4, 2))[""]
        40

    Note:
        A bool tensor counts 1 byte per element, what it takes in memory (Accelerate counts
        1/8).
    """
    if not isinstance(model, nn.Module):
        raise invalid("model", brief(model), "expected a torch.nn.Module", TypeError)
    target = None if dtype is None else _as_dtype("dtype", dtype)
    if special_dtypes is not None and not isinstance(special_dtypes, Mapping):
        raise invalid("special_dtypes", brief(special_dtypes), "expected a dict or None", TypeError)
    special = {k: _as_dtype(f"special_dtypes[{k!r}]", v) for k, v in (special_dtypes or {}).items()}
    check_bool("buffers_only", buffers_only)
    tensors = chain(() if buffers_only else model.named_parameters(), model.named_buffers())
    sizes: defaultdict[str, int] = defaultdict(int)
    for name, tensor in tensors:
        if name in special:
            width = special[name].itemsize
        elif target is None or not (tensor.is_floating_point() or tensor.is_complex()):
            width = tensor.dtype.itemsize  # integer and bool tensors are never cast
        else:
            width = min(target.itemsize, tensor.dtype.itemsize)
        size = tensor.numel() * width
        parts = name.split(".")
        for end in range(len(parts) + 1):
            sizes[".".join(parts[:end])] += size
    return sizes
