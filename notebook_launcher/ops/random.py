"""Seeding and synchronising random number generators across the processes of a job."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..state.partial import PartialState
from ..utils.enums import RNGType
from ..utils.validation import check_bool, check_int, invalid
from .communicator import current
from .debug import brief, verify

MAX_SEED = 2**32 - 1  # numpy's limit, so one seed serves every library
_SUPPORTED = (RNGType.TORCH, RNGType.CUDA, RNGType.XPU, RNGType.GENERATOR)


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and every accelerator) in this process.

    Args:
        seed: the seed, 0 to 2**32 - 1.
        device_specific: add this process's index to the seed, so each process draws
            different numbers (data augmentation, dropout) yet reproducibly.
        deterministic: also make torch use deterministic algorithms
            (``torch.use_deterministic_algorithms(True)``).

    Example:
        >>> set_seed(42)                        # every process draws the same numbers
        >>> set_seed(42, device_specific=True)  # process i uses seed 42 + i

    Note:
        Works without an Accelerator: ``device_specific`` reads the index from
        :class:`PartialState` (created if needed). Seeding never initialises a GPU runtime, so
        it is safe in the notebook before a launch.
    """
    check_int("seed", seed, 0)
    check_bool("device_specific", device_specific)
    check_bool("deterministic", deterministic)
    final = seed + PartialState().process_index if device_specific else seed
    if final > MAX_SEED:
        allowed = f"seeds go up to {MAX_SEED}" + (
            f" (here seed + process index = {final})" if device_specific else ""
        )
        raise invalid("seed", seed, allowed)
    random.seed(final)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(final)
    torch.manual_seed(final)  # also seeds CUDA, MPS and XPU, lazily
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _rng_type(value: Any, generator: Any) -> RNGType:
    if value is None:
        return RNGType.GENERATOR if generator is not None else RNGType.TORCH
    allowed = "allowed values are " + ", ".join(repr(t.value) for t in _SUPPORTED) + " or None"
    try:
        kind = RNGType(value)
    except ValueError:
        raise invalid(
            "rng_type", value, allowed, TypeError if not isinstance(value, str) else ValueError
        )
    if kind not in _SUPPORTED:
        raise invalid("rng_type", value, f"{allowed} (other devices are not supported here)")
    return kind


def _accessors(kind: RNGType, generator: Any) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """How to read and write the state of one kind of generator."""
    if kind is RNGType.GENERATOR:
        if not isinstance(generator, torch.Generator):
            raise invalid(
                "generator", generator, "rng_type='generator' needs a torch.Generator", TypeError
            )
        return generator.get_state, generator.set_state
    module = getattr(torch, kind.value) if kind is not RNGType.TORCH else torch
    if kind is not RNGType.TORCH and not module.is_available():
        raise invalid("rng_type", kind.value, f"no {kind.value} device is available here")
    return module.get_rng_state, module.set_rng_state


def synchronize_rng_states(rng_types: Iterable[str | RNGType], generator: Any = None) -> None:
    """Give every process the random state of process 0 for each generator in ``rng_types``.

    Args:
        rng_types: a list of "torch" (torch's default CPU generator), "cuda", "xpu" (the
            current device's default generator) and "generator" (``generator``).
        generator: the ``torch.Generator`` synchronised for "generator".

    Example:
        >>> synchronize_rng_states(["torch", "generator"], generator=sampler_generator)

    Note:
        All the states travel in one broadcast. Works without an Accelerator. Only the CPU,
        CUDA, XPU and ``torch.Generator`` kinds are supported.
    """
    if isinstance(rng_types, (str, RNGType)) or not isinstance(rng_types, Iterable):
        raise invalid("rng_types", brief(rng_types), "expected a list of RNG types", TypeError)
    kinds = [_rng_type(value, generator) for value in rng_types]
    accessors = [_accessors(kind, generator) for kind in kinds]
    comm = current()
    if comm.world_size == 1 or not kinds:
        return
    states = [get() for get, _ in accessors]
    if comm.debug:
        shown = ", ".join(
            f"{k.value}: {s.numel()} bytes" for k, s in zip(kinds, states, strict=True)
        )
        verify(comm, f"synchronize_rng_states([{shown}])")
    flat = torch.cat([s.reshape(-1) for s in states]).to(comm.control_device)
    comm.broadcast(flat, 0)
    flat = flat.cpu()
    start = 0
    for (_, set_state), state in zip(accessors, states, strict=True):
        set_state(flat[start : start + state.numel()].clone())
        start += state.numel()


def synchronize_rng_state(rng_type: str | RNGType | None, generator: Any = None) -> None:
    """Give every process the random state of process 0 for one generator.

    Args:
        rng_type: "torch", "cuda", "xpu" or "generator" (see :func:`synchronize_rng_states`).
        generator: the ``torch.Generator`` synchronised when ``rng_type`` is "generator".

    Example:
        >>> synchronize_rng_state("torch")
        >>> torch.rand(1)  # the same number on every process

    Note:
        ``rng_type`` is required, as in Accelerate 1.16 and later. ``None`` means
        "generator" when a generator is given, else "torch" (Accelerate fails on None).
    """
    synchronize_rng_states([_rng_type(rng_type, generator)], generator)
