"""Saving and restoring a whole training state: models, optimizers, schedulers, scaler, data, RNGs.

Layout of a checkpoint directory (the names Accelerate uses where it has them):

- ``model.safetensors`` / ``model_1.safetensors`` ... (``pytorch_model.bin`` ... without
  safetensors), ``optimizer.bin``, ``scheduler.bin``, ``scaler.pt``,
  ``custom_checkpoint_0.pkl`` ... and, for loaders built on torchdata's ``StatefulDataLoader``
  only, ``dl_state_dict.bin``, ``dl_state_dict_1.bin`` ... (torchdata's state): written once
  (by each node's main process with ``save_on_each_node``);
- ``random_states_<rank>.pkl``: one per process, since each process has its own random
  generators. Where some loaders are stateful, it also holds their full states (this process's
  own, with the random states at their epoch's start) under ``"dataloader_states"``, a key
  Accelerate does not read; an exact resume (``TrainingObjects.exact``) saved inside an
  accumulation window adds ``gradients_<rank>.bin``.

No other file: without stateful loaders and outside an accumulation window (or without an
exact resume), the directory holds the files Accelerate's ``save_state`` writes.

Model weights are written as the state dicts of the models inside the DistributedDataParallel
and ``torch.compile`` wrappers (no ``module.`` or ``_orig_mod.`` prefix), and the random states
as a ``torch.save`` file with Accelerate's keys, as Accelerate writes them: Accelerate's
``load_state`` reads a checkpoint written here, and ``load_state`` here reads one Accelerate
wrote (and one whose names carry a wrapper's prefix).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

import torch

from ..data.stateful import is_stateful
from ..ops.modeling import extract_model_from_parallel
from ..ops.saving import save
from ..state.partial import PartialState
from ..utils.validation import invalid
from .prepared import Prepared

MODEL_NAME = "pytorch_model"
SAFE_MODEL_NAME = "model"
RNG_STATE_NAME = "random_states"
LOADER_STATES = "dataloader_states"  # in the random states file: the stateful loaders' states
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
# Decimal units as Accelerate (via huggingface_hub) reads them, plus the binary ones.
_SIZE_UNITS = {
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]I?B)\s*", re.IGNORECASE)
_DEVICE_RNGS = ("cuda", "xpu")


@dataclass
class TrainingObjects:
    """What a checkpoint holds, in the order the Accelerator prepared them."""

    prepared: Prepared = field(default_factory=Prepared)
    scaler: Any = None
    step: int = 0  # batches into the current accumulation window
    exact: bool = False  # an exact resume: the gradients of a window are restored too
    gradients: bool = False  # save the gradients accumulated so far (saved mid-window)
    # The state dicts written as model files, in file order (None: every model's own).
    weights: list[Any] | None = None
    # The models filled from the model files, in file order (None: every model).
    load_into: list[Any] | None = None


def _suffix(name: str, index: int, extension: str) -> str:
    return f"{name}{'' if index == 0 else f'_{index}'}.{extension}"


def model_file(index: int, safe_serialization: bool) -> str:
    """The file name of the ``index``-th model's weights."""
    if safe_serialization:
        return _suffix(SAFE_MODEL_NAME, index, "safetensors")
    return _suffix(MODEL_NAME, index, "bin")


# This process's random generators under the keys Accelerate's checkpoints use, so that each
# side restores the other's: (key, torch module of a device, or None for the CPU generators).
_RNG_KEYS = {
    "random": "random_state",
    "numpy": "numpy_random_seed",
    "torch": "torch_manual_seed",
    "cuda": "torch_cuda_manual_seed",
    "xpu": "torch_xpu_manual_seed",
}


def capture_rng_states() -> dict[str, Any]:
    """This process's random states: Python, NumPy, torch, and initialised accelerators.

    The keys are those of Accelerate's ``random_states_<rank>.pkl``.
    """
    states: dict[str, Any] = {
        _RNG_KEYS["random"]: random.getstate(),
        _RNG_KEYS["torch"]: torch.get_rng_state(),
    }
    try:
        import numpy
    except ImportError:
        pass
    else:
        states[_RNG_KEYS["numpy"]] = numpy.random.get_state()
    for name in _DEVICE_RNGS:
        # Only an initialised device: asking an uninitialised one would initialise it (CUDA
        # in a forked worker cannot be).
        module = getattr(torch, name, None)
        if module is not None and module.is_initialized():
            states[_RNG_KEYS[name]] = module.get_rng_state_all()
    return states


def _state(states: dict[str, Any], name: str) -> Any:
    """The saved state of generator ``name``: under Accelerate's key, or the older short one."""
    return states.get(_RNG_KEYS[name], states.get(name))


def restore_rng_states(states: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng_states` returned (or Accelerate saved)."""
    random.setstate(_state(states, "random"))
    torch.set_rng_state(_state(states, "torch"))
    if _state(states, "numpy") is not None:
        import numpy

        numpy.random.set_state(_state(states, "numpy"))
    for name in _DEVICE_RNGS:
        saved = _state(states, name)
        if saved is not None and getattr(torch, name).is_available():
            getattr(torch, name).set_rng_state_all(saved)


def read_rng_file(path: str) -> dict[str, Any]:
    """A ``random_states_<rank>.pkl``: a ``torch.save`` archive (Accelerate's and this
    package's), or a plain pickle (written by earlier releases of this package)."""
    if zipfile.is_zipfile(path):
        return torch.load(path, map_location="cpu", weights_only=False)
    with open(path, "rb") as f:
        return pickle.load(f)


def _stateful_file(index: int) -> str:
    """Where Accelerate keeps the state of its ``index``-th StatefulDataLoader."""
    return "dl_state_dict.bin" if index == 0 else f"dl_state_dict_{index}.bin"


def _grads(model: Any) -> list[torch.Tensor | None]:
    return [p.grad for p in extract_model_from_parallel(model).parameters()]


def _writes_shared(save_on_each_node: bool) -> bool:
    state = PartialState()
    return state.is_local_main_process if save_on_each_node else state.is_main_process


def save_training_state(
    output_dir: str,
    objects: TrainingObjects,
    safe_serialization: bool = True,
    save_on_each_node: bool = False,
) -> str:
    """Write every object of ``objects`` and this process's random states to ``output_dir``.

    Call it on every process; it returns once every process has written its files.
    """
    state = PartialState()
    os.makedirs(output_dir, exist_ok=True)
    shared = _writes_shared(save_on_each_node)
    weights = objects.weights
    if weights is None:  # the models inside the wrappers, as Accelerate writes them
        weights = [
            extract_model_from_parallel(m, keep_torch_compile=False).state_dict()
            for m in objects.prepared.models
        ]
    for i, state_dict in enumerate(weights):
        path = os.path.join(output_dir, model_file(i, safe_serialization))
        save(state_dict, path, save_on_each_node, safe_serialization)
    if shared:
        for name, items in (
            ("optimizer", objects.prepared.optimizers),
            ("scheduler", objects.prepared.schedulers),
        ):
            for i, item in enumerate(items):
                torch.save(item.state_dict(), os.path.join(output_dir, _suffix(name, i, "bin")))
        if objects.scaler is not None:
            torch.save(objects.scaler.state_dict(), os.path.join(output_dir, "scaler.pt"))
        for i, item in enumerate(objects.prepared.custom_objects):
            torch.save(item.state_dict(), os.path.join(output_dir, f"custom_checkpoint_{i}.pkl"))
    rank = state.process_index
    loaders = [
        loader.state_dict() if is_stateful(loader) else None
        for loader in objects.prepared.dataloaders
    ]
    for i, saved in enumerate(loaders):
        if shared and saved is not None:
            # torchdata's part, under Accelerate's name: what Accelerate's load_state reads
            # (an empty state, out of an epoch, starts the next one).
            torch.save(saved["loader"] or {}, os.path.join(output_dir, _stateful_file(i)))
    if objects.gradients:
        grads = [_grads(model) for model in objects.prepared.models]
        torch.save(grads, os.path.join(output_dir, f"gradients_{rank}.bin"))
    # Last, so that nothing above (a state_dict() that draws) shifts the saved generators.
    states = {"step": objects.step, **capture_rng_states()}
    if any(saved is not None for saved in loaders):
        states[LOADER_STATES] = loaders
    torch.save(states, os.path.join(output_dir, f"{RNG_STATE_NAME}_{rank}.pkl"))
    state.wait_for_everyone()
    return output_dir


def _load(path: str, map_location: Any, **kwargs: Any) -> Any:
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} is missing: the checkpoint was saved with fewer objects of this kind than "
            "are prepared now (prepare and register the same objects as when it was saved)"
        )
    # Checkpoints hold optimizer and custom states, pickled objects: trusted files, as in
    # Accelerate; ``load_kwargs`` may still ask for ``weights_only=True``.
    return torch.load(path, map_location=map_location, **{"weights_only": False, **kwargs})


_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel's, torch.compile's


def _unprefixed(weights: dict[str, Any], expected: set[str]) -> dict[str, Any]:
    """``weights`` with the wrappers' prefixes removed where the model expects plain names
    (a checkpoint written from a wrapped model, by Accelerate or here, into a plain one)."""
    if not weights or set(weights) & expected:
        return weights
    plain = {}
    for key, value in weights.items():
        while key not in expected and key.startswith(_WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        plain[key] = value
    return plain


def _tied(model: torch.nn.Module) -> dict[str, set[str]]:
    """For each state-dict name, the other names of the same tensor (tied weights)."""
    by_tensor: dict[tuple[int, int], set[str]] = {}
    state = model.state_dict(keep_vars=True)
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
            by_tensor.setdefault(key, set()).add(name)
    return {n: names - {n} for names in by_tensor.values() for n in names}


def load_model_weights(
    model: torch.nn.Module, weights: dict[str, Any], strict: bool = True, **kwargs: Any
) -> Any:
    """``model.load_state_dict(weights, strict, **kwargs)``, where a tied weight saved under one
    of its names only (as Accelerate's safetensors files hold them) counts as present."""
    weights = _unprefixed(dict(weights), set(model.state_dict()))
    result = model.load_state_dict(weights, strict=False, **kwargs)
    if strict:
        tied = _tied(model)
        missing = [k for k in result.missing_keys if not (tied.get(k, set()) & set(weights))]
        if missing or result.unexpected_keys:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(model).__name__}: missing keys "
                f"{missing}, unexpected keys {result.unexpected_keys} (pass strict=False to "
                "load_state to load the keys that match)"
            )
    return result


def load_training_state(
    input_dir: str,
    objects: TrainingObjects,
    load_kwargs: dict,
    model_kwargs: dict | None = None,
) -> int:
    """Restore ``objects`` and this process's random states from ``input_dir``.

    Args:
        input_dir: the checkpoint directory.
        objects: what to fill.
        load_kwargs: passed to ``torch.load`` for the optimizers and schedulers.
        model_kwargs: passed to each model's ``load_state_dict`` (``strict``, ``assign``),
            plus ``map_location``: "cpu" or "on_device", where optimizer states are put
            (default: the process's device).

    Returns:
        The saved position in the accumulation window (``TrainingObjects.step``).

    Raises:
        FileNotFoundError: ``input_dir`` or one of the files it should hold is missing.
    """
    if not os.path.isdir(input_dir):
        raise FileNotFoundError(f"input_dir={input_dir!r} is not a checkpoint directory")
    state = PartialState()
    model_kwargs = dict(model_kwargs or {})
    where = model_kwargs.pop("map_location", None)
    if where not in (None, "cpu", "on_device"):
        raise invalid("map_location", where, "expected None, 'cpu' or 'on_device'", TypeError)
    device = "cpu" if where == "cpu" else state.device
    targets = objects.prepared.models if objects.load_into is None else objects.load_into
    for i, model in enumerate(targets):
        inner = extract_model_from_parallel(model, keep_torch_compile=False)
        safe = os.path.join(input_dir, model_file(i, True))
        if os.path.exists(safe):
            from safetensors.torch import load_file

            weights = load_file(safe, device="cpu")
        else:
            weights = _load(os.path.join(input_dir, model_file(i, False)), "cpu", **load_kwargs)
        load_model_weights(inner, weights, **model_kwargs)
    for name, items in (
        ("optimizer", objects.prepared.optimizers),
        ("scheduler", objects.prepared.schedulers),
    ):
        for i, item in enumerate(items):
            item.load_state_dict(
                _load(os.path.join(input_dir, _suffix(name, i, "bin")), device, **load_kwargs)
            )
    if objects.scaler is not None:
        objects.scaler.load_state_dict(_load(os.path.join(input_dir, "scaler.pt"), "cpu"))
    for i, item in enumerate(objects.prepared.custom_objects):
        item.load_state_dict(_load(os.path.join(input_dir, f"custom_checkpoint_{i}.pkl"), "cpu"))
    rank = state.process_index
    rng_path = os.path.join(input_dir, f"{RNG_STATE_NAME}_{rank}.pkl")
    if not os.path.exists(rng_path):
        raise FileNotFoundError(
            f"{rng_path} is missing: the checkpoint was saved by fewer processes than this job has"
        )
    states = read_rng_file(rng_path)
    _load_loaders(input_dir, objects.prepared.dataloaders, states.get(LOADER_STATES) or [])
    if objects.exact:
        grads_path = os.path.join(input_dir, f"gradients_{rank}.bin")
        saved_grads = _load(grads_path, "cpu") if os.path.exists(grads_path) else None
        for i, model in enumerate(objects.prepared.models):
            params = list(extract_model_from_parallel(model).parameters())
            grads = saved_grads[i] if saved_grads else [None] * len(params)
            for param, grad in zip(params, grads, strict=True):
                param.grad = None if grad is None else grad.to(param.device)
    restore_rng_states(states)
    return int(states.get("step", 0))


def _load_loaders(input_dir: str, loaders: list[Any], saved: list[Any]) -> None:
    """Move the stateful ``loaders`` to their saved positions (others are left alone, as in
    Accelerate): from this process's full states ``saved``, else from torchdata's states
    (``dl_state_dict.bin`` ..., as Accelerate saves them)."""
    for i, loader in enumerate(loaders):
        if not is_stateful(loader):
            continue
        accelerates = os.path.join(input_dir, _stateful_file(i))
        if i < len(saved) and saved[i] is not None:
            loader.load_state_dict(saved[i])
        elif os.path.exists(accelerates):
            loader.load_state_dict(_load(accelerates, "cpu"))


def checkpoint_dirs(project_dir: str) -> list[str]:
    """The automatic checkpoints of a project, oldest first."""
    root = os.path.join(project_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    named = [d for d in os.listdir(root) if d.startswith("checkpoint_")]
    numbered = sorted((int(d.split("_", 1)[1]), d) for d in named if d.split("_", 1)[1].isdigit())
    return [os.path.join(root, d) for _, d in numbered]


def parse_shard_size(max_shard_size: Any) -> int:
    """``max_shard_size`` in bytes: an int, or a string such as "10GB", "500MB" or "2GiB".

    Raises:
        TypeError, ValueError: not a positive int or a size with a unit (KB, MB, GB, TB,
            KiB, MiB, GiB, TiB).
    """
    allowed = 'expected a positive int of bytes or a size such as "10GB", "500MB" or "2GiB"'
    if isinstance(max_shard_size, int) and not isinstance(max_shard_size, bool):
        if max_shard_size < 1:
            raise invalid("max_shard_size", max_shard_size, allowed)
        return max_shard_size
    if not isinstance(max_shard_size, str):
        raise invalid("max_shard_size", max_shard_size, allowed, TypeError)
    match = _SIZE.fullmatch(max_shard_size)
    size = int(float(match[1]) * _SIZE_UNITS[match[2].upper()]) if match else 0
    if size < 1:
        raise invalid("max_shard_size", max_shard_size, allowed)
    return size


def shard_state_dict(
    state_dict: dict[str, torch.Tensor], max_bytes: int
) -> list[dict[str, torch.Tensor]]:
    """``state_dict`` cut, in order, into dicts of at most ``max_bytes`` of tensor data.

    A tensor larger than ``max_bytes`` gets a shard of its own; an empty dict gives one empty
    shard.
    """
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name, tensor in state_dict.items():
        size = tensor.numel() * tensor.element_size()
        if shards[-1] and used + size > max_bytes:
            shards.append({})
            used = 0
        shards[-1][name] = tensor
        used += size
    return shards


def _shard_names(safe_serialization: bool, count: int) -> list[str]:
    whole = model_file(0, safe_serialization)
    if count == 1:
        return [whole]
    stem, extension = whole.split(".", 1)
    return [f"{stem}-{i:05d}-of-{count:05d}.{extension}" for i in range(1, count + 1)]


def _remove_stale(directory: str, safe_serialization: bool, keep: list[str]) -> None:
    """Delete the weights files (and index) of an earlier save that this one does not write."""
    whole = model_file(0, safe_serialization)
    stem, extension = whole.split(".", 1)
    pattern = re.compile(rf"{re.escape(stem)}-\d{{5}}-of-\d{{5}}\.{re.escape(extension)}")
    index = SAFE_WEIGHTS_INDEX_NAME if safe_serialization else WEIGHTS_INDEX_NAME
    keep = keep + [index] if len(keep) > 1 else keep
    for name in os.listdir(directory):
        ours = name in (whole, index) or pattern.fullmatch(name) is not None
        path = os.path.join(directory, name)
        if ours and name not in keep and os.path.isfile(path):
            os.remove(path)


def save_model_files(
    state_dict: dict[str, torch.Tensor],
    directory: str,
    max_bytes: int,
    safe_serialization: bool = True,
    save_on_each_node: bool = False,
) -> list[str]:
    """Write ``state_dict`` into ``directory`` as one weights file or as shards with an index.

    Call it on every process: only the main process (each node's with ``save_on_each_node``)
    writes. Shards are named ``model-00001-of-00003.safetensors`` (``pytorch_model-...bin``)
    and listed in ``model.safetensors.index.json`` (``pytorch_model.bin.index.json``); shards
    and an index left by an earlier save into the same directory are removed.

    Returns:
        The names of the weights files, in order.
    """
    shards = shard_state_dict(state_dict, max_bytes)
    names = _shard_names(safe_serialization, len(shards))
    os.makedirs(directory, exist_ok=True)
    writer = _writes_shared(save_on_each_node)
    for name, shard in zip(names, shards, strict=True):
        save(shard, os.path.join(directory, name), save_on_each_node, safe_serialization)
    if writer and len(shards) > 1:
        index = {
            "metadata": {
                "total_size": sum(t.numel() * t.element_size() for t in state_dict.values())
            },
            "weight_map": {
                key: name for name, shard in zip(names, shards, strict=True) for key in shard
            },
        }
        index_name = SAFE_WEIGHTS_INDEX_NAME if safe_serialization else WEIGHTS_INDEX_NAME
        with open(os.path.join(directory, index_name), "w", encoding="utf-8") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    if writer:  # last, so that a save that fails removes nothing
        _remove_stale(directory, safe_serialization, names)
    return names
