"""Seeding and RNG synchronisation, in one process and across real ranks, without an Accelerator."""

from __future__ import annotations

import random

import numpy
import pytest
import torch

from notebook_launcher import PartialState, notebook_launcher, ops
from notebook_launcher.state import RNGType, is_initialized
from notebook_launcher.utils.environment import cuda_device_count


def draws(generator: torch.Generator | None = None) -> tuple:
    """One number from each library's generator (and from ``generator``)."""
    extra = [] if generator is None else torch.rand(2, generator=generator).tolist()
    return (random.random(), float(numpy.random.rand()), *torch.rand(2).tolist(), *extra)


def test_set_seed_makes_every_library_reproducible_in_one_process():
    ops.set_seed(1234)
    first = draws()
    ops.set_seed(1234)
    assert draws() == first
    ops.set_seed(1234, device_specific=True)  # process 0 of 1: the same seed
    assert draws() == first
    ops.set_seed(1235)
    assert draws() != first
    assert not is_initialized()  # no Accelerator was needed, none was created


def test_set_seed_deterministic_turns_on_deterministic_algorithms():
    before = torch.are_deterministic_algorithms_enabled()
    try:
        ops.set_seed(0, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seed": -1}, ValueError, "seed=-1 is not valid"),
        ({"seed": 2**32}, ValueError, "seeds go up to 4294967295"),
        ({"seed": "1"}, TypeError, "seed='1' is not valid"),
        ({"seed": True}, TypeError, "seed=True is not valid"),
        ({"seed": 1, "device_specific": 1}, TypeError, "device_specific=1 is not valid"),
        ({"seed": 1, "deterministic": None}, TypeError, "deterministic=None is not valid"),
    ],
)
def test_set_seed_refuses_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        ops.set_seed(**kwargs)


def test_synchronize_in_one_process_changes_nothing():
    generator = torch.Generator().manual_seed(5)
    torch.manual_seed(3)
    state, gen_state = torch.get_rng_state(), generator.get_state()
    ops.synchronize_rng_state("torch")
    ops.synchronize_rng_state(RNGType.GENERATOR, generator)
    ops.synchronize_rng_states(["torch", "generator"], generator=generator)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(generator.get_state(), gen_state)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: ops.synchronize_rng_state("npu"), ValueError, "rng_type='npu' is not valid"),
        (lambda: ops.synchronize_rng_state("dice"), ValueError, "rng_type='dice' is not valid"),
        (lambda: ops.synchronize_rng_state(5), TypeError, "rng_type=5 is not valid"),
        (lambda: ops.synchronize_rng_state("generator"), TypeError, "generator=None is not"),
        (lambda: ops.synchronize_rng_states("torch"), TypeError, "rng_types='torch' is not"),
        (lambda: ops.synchronize_rng_states(3), TypeError, "rng_types=3 is not"),
    ],
)
def test_synchronize_refuses_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
    ops.synchronize_rng_states(["torch"], generator=3)  # only checked for "generator"


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the error where there is no GPU")
def test_synchronize_cuda_without_a_gpu_says_so():
    with pytest.raises(ValueError, match="rng_type='cuda' is not valid: no cuda device"):
        ops.synchronize_rng_state("cuda")


def seeded():
    state = PartialState()
    rank = state.process_index
    out = {}
    ops.set_seed(42)
    out["same_seed"] = draws()
    ops.set_seed(42, device_specific=True)
    out["device_specific"] = draws()

    torch.manual_seed(1000 + rank)  # every rank diverges ...
    ops.synchronize_rng_state(None)  # ... until rank 0's torch state is everyone's
    out["synced_torch"] = torch.rand(3).tolist()

    generator = torch.Generator().manual_seed(2000 + rank)
    ops.synchronize_rng_state(None, generator=generator)  # rng_type None with a generator
    out["synced_generator"] = torch.rand(3, generator=generator).tolist()

    torch.manual_seed(3000 + rank)
    generator.manual_seed(4000 + rank)
    ops.synchronize_rng_states([RNGType.TORCH, "generator"], generator=generator)
    out["synced_both"] = draws(generator)[2:]
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_seeds_and_synchronisation_across_ranks(world):
    results = notebook_launcher(seeded, num_processes=world, output="none")
    assert all(r["same_seed"] == results[0]["same_seed"] for r in results)
    for rank, out in enumerate(results):
        ops.set_seed(42 + rank)
        assert out["device_specific"] == draws()  # seed + process index, reproducibly
    assert len({tuple(r["device_specific"]) for r in results}) == world
    torch.manual_seed(1000)
    expected = torch.rand(3).tolist()
    assert all(r["synced_torch"] == expected for r in results)
    generator = torch.Generator().manual_seed(2000)
    expected = torch.rand(3, generator=generator).tolist()
    assert all(r["synced_generator"] == expected for r in results)
    torch.manual_seed(3000)
    generator.manual_seed(4000)
    expected = (*torch.rand(2).tolist(), *torch.rand(2, generator=generator).tolist())
    assert all(tuple(r["synced_both"]) == expected for r in results)
