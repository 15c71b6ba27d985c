"""Saving from a job: once per job or per node, with torch or safetensors; offloading weights."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import torch

from ..state.partial import PartialState
from ..utils.validation import check_bool, check_path, invalid
from .debug import brief

OFFLOAD_INDEX = "index.json"
# dtypes stored as raw arrays under NumPy's name (bfloat16 goes as its int16 bits, as Accelerate).
_RAW_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}


def _check_state_dict(state_dict: Any) -> Mapping[str, torch.Tensor]:
    if not isinstance(state_dict, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state_dict.items()
    ):
        raise invalid(
            "state_dict", brief(state_dict), "expected a dict of str names to tensors", TypeError
        )
    return state_dict


def _offload_one(save_dir: str, name: str, tensor: torch.Tensor) -> dict[str, Any]:
    array = tensor.detach().cpu().contiguous()
    if array.dtype is torch.bfloat16:
        array, dtype = array.view(torch.int16), "bfloat16"
    elif array.dtype in _RAW_DTYPES:
        dtype = str(array.dtype).removeprefix("torch.")
    else:
        raise invalid(
            f"state_dict[{name!r}]",
            f"<tensor of dtype {array.dtype}>",
            "offloading supports bool, integer, float16/32/64, bfloat16 and complex tensors",
            TypeError,
        )
    array.numpy().tofile(os.path.join(save_dir, f"{name}.dat"))
    return {"dtype": dtype, "shape": list(tensor.shape)}


def offload_state_dict(save_dir: str | os.PathLike, state_dict: dict[str, torch.Tensor]) -> None:
    """Write each tensor of ``state_dict`` to ``save_dir`` as a raw array, with an index file.

    Each tensor goes to ``<save_dir>/<name>.dat`` (C order, one element for a 0-d tensor) and
    ``<save_dir>/index.json`` maps each name to ``{"dtype": ..., "shape": [...]}``; an existing
    index is updated, not replaced. The layout is Accelerate's, so its offloaded-weight loaders
    read these files.

    Args:
        save_dir: the folder (created if needed).
        state_dict: tensors by name; the dict and its tensors are not modified.

    Example:
        >>> offload_state_dict("offload", model.state_dict())
    """
    folder = check_path("save_dir", save_dir)
    tensors = _check_state_dict(state_dict)
    os.makedirs(folder, exist_ok=True)
    index = {name: _offload_one(folder, name, t) for name, t in tensors.items()}
    path = os.path.join(folder, OFFLOAD_INDEX)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            index = {**json.load(f), **index}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)


def _safe_copy(obj: Any) -> dict[str, torch.Tensor]:
    """A new dict safetensors accepts: contiguous tensors, none sharing memory with another."""
    seen: set[int] = set()
    out = {}
    for name, t in obj.items():
        storage = t.untyped_storage().data_ptr() if t.device.type != "meta" else None
        shared = storage is not None and storage in seen and t.numel() > 0
        if storage is not None:
            seen.add(storage)
        out[name] = t.clone(memory_format=torch.contiguous_format) if shared else t.contiguous()
    return out


def save(
    obj: Any, f: Any, save_on_each_node: bool = False, safe_serialization: bool = False
) -> None:
    """Save ``obj`` from one process: the main process, or each node's main process.

    Call it on every process; the others return at once.

    Args:
        obj: what to save (for ``safe_serialization``, a dict of str names to tensors).
        f: a path, or (without ``safe_serialization``) a file object, as ``torch.save`` takes.
        save_on_each_node: save once per node (for nodes that do not share a file system)
            instead of once per job.
        safe_serialization: write a safetensors file instead of a pickle.

    Example:
        >>> save(model.state_dict(), "model.safetensors", safe_serialization=True)

    Note:
        With ``safe_serialization``, tensors that share memory (tied weights) or are not
        contiguous are saved as copies in a new dict; the caller's dict and tensors are never
        modified (Accelerate's safetensors path refuses shared tensors).
    """
    check_bool("save_on_each_node", save_on_each_node)
    check_bool("safe_serialization", safe_serialization)
    if safe_serialization:
        path = check_path("f", f)
        try:
            from safetensors.torch import save_file
        except ImportError:
            raise ImportError(
                "save(..., safe_serialization=True) needs the safetensors package: "
                "pip install safetensors"
            ) from None
        _check_state_dict(obj)
    elif not isinstance(f, (str, os.PathLike)) and not hasattr(f, "write"):
        raise invalid("f", brief(f), "expected a path or a writable file object", TypeError)
    state = PartialState()
    if not (state.is_local_main_process if save_on_each_node else state.is_main_process):
        return
    if safe_serialization:
        save_file(_safe_copy(obj), path, metadata={"format": "pt"})
    else:
        torch.save(obj, f)
