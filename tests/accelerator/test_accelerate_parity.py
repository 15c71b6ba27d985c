"""Accelerate code that must behave as in Accelerate: the caller's generator shared with the
prepared loader, ``AcceleratorState().distributed_type`` set by a script,
``find_executable_batch_size`` and ``release_memory``."""

from __future__ import annotations

import gc
import weakref

import accelerate
import accelerate.utils
import pytest
import torch
from accelerate.state import AcceleratorState as TheirState
from accelerate.state import GradientState as TheirGradientState
from torch.utils.data import DataLoader, TensorDataset

import notebook_launcher
import notebook_launcher.utils
from notebook_launcher import Accelerator, AcceleratorState, DistributedType, PartialState


def _forget_theirs():
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()


@pytest.fixture(autouse=True)
def no_accelerate_state():
    _forget_theirs()
    yield
    _forget_theirs()


def _train(make_accelerator, reseed_after_prepare: bool, epochs: int = 2) -> dict:
    """A shuffled loader with its own generator, seeded (again) after prepare, as scripts do."""
    accelerator = make_accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.arange(48.0).reshape(16, 3) / 48, torch.arange(16.0)[:, None])
    generator = torch.Generator().manual_seed(1)
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=generator)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if reseed_after_prepare:
        generator.manual_seed(1234)
    for _ in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    inner = getattr(model, "module", model)
    return {k: v.detach().clone() for k, v in inner.state_dict().items()}


@pytest.mark.parametrize("reseed", [False, True])
def test_a_shuffled_loader_trains_the_model_accelerate_trains(reseed):
    theirs = _train(lambda: accelerate.Accelerator(cpu=True), reseed)
    _forget_theirs()
    ours = _train(lambda: Accelerator(cpu=True), reseed)
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=0)
    notebook_launcher.state.reset_state()
    other = _train(lambda: Accelerator(cpu=True), not reseed)
    assert not torch.equal(other["weight"], ours["weight"])  # the reseed did change the order


def _launched_training(kind: str) -> dict:
    make = (lambda: accelerate.Accelerator()) if kind == "theirs" else (lambda: Accelerator())
    return _train(make, reseed_after_prepare=True)


def test_across_two_launched_ranks_the_model_is_accelerates():
    ours = notebook_launcher.notebook_launcher(
        _launched_training, ("ours",), num_processes=2, ui="none"
    )
    theirs = notebook_launcher.notebook_launcher(
        _launched_training, ("theirs",), num_processes=2, ui="none"
    )
    for rank in (0, 1):
        for key in theirs[0]:
            torch.testing.assert_close(ours[rank][key], theirs[0][key], rtol=0, atol=0)


def test_distributed_type_is_settable_as_in_accelerates_scripts():
    accelerator = Accelerator(cpu=True)
    original = accelerator.state.distributed_type
    accelerator.state.distributed_type = DistributedType.FSDP
    assert accelerator.distributed_type is DistributedType.FSDP
    assert AcceleratorState().distributed_type is DistributedType.FSDP
    assert PartialState().distributed_type is original  # Accelerate's PartialState keeps its own
    accelerator.state.distributed_type = original
    assert accelerator.distributed_type is original
    accelerator.state.distributed_type = "MULTI_CPU"
    assert accelerator.distributed_type is DistributedType.MULTI_CPU
    with pytest.raises(ValueError, match="distributed_type='nope'"):
        accelerator.state.distributed_type = "nope"
    with pytest.raises(TypeError, match="distributed_type=3"):
        accelerator.state.distributed_type = 3


def _oom_below(limit: int, tried: list, message: str = "CUDA out of memory. Tried to allocate"):
    def train(batch_size, scale, offset=0):
        tried.append(batch_size)
        if batch_size > limit:
            raise RuntimeError(message)
        return batch_size * scale + offset

    return train


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes",
        "MPS backend out of memory (MPS allocated: 1 GB)",
    ],
)
def test_find_executable_batch_size_tries_the_sizes_accelerate_tries(message):
    results = []
    for module in (accelerate.utils, notebook_launcher.utils):
        tried: list[int] = []
        decorated = module.find_executable_batch_size(
            _oom_below(50, tried, message), starting_batch_size=100
        )
        results.append((decorated(2, offset=1), decorated(3), tried))
    assert results[0] == results[1]
    assert results[1][2] == [100, 90, 81, 72, 64, 57, 51, 45, 45]


def test_find_executable_batch_size_as_accelerate_documents_it():
    assert notebook_launcher.find_executable_batch_size is (
        notebook_launcher.utils.find_executable_batch_size
    )
    tried: list[int] = []
    sizes = iter([20, 5])

    @notebook_launcher.find_executable_batch_size(
        starting_batch_size=64, reduce_batch_size_fn=lambda: next(sizes)
    )
    def train(batch_size, scale):
        return _oom_below(8, tried)(batch_size, scale)

    assert train(1) == 5 and tried == [64, 20, 5]
    with pytest.raises(TypeError, match="batch size"):
        train(64, 1)
    with pytest.raises(ValueError, match="other"):
        notebook_launcher.find_executable_batch_size(
            lambda batch_size: (_ for _ in ()).throw(ValueError("other"))
        )()
    with pytest.raises(RuntimeError, match="zero"):
        notebook_launcher.find_executable_batch_size(_oom_below(-1, []), starting_batch_size=2)(1)


def test_release_memory_returns_nones_and_frees_the_objects():
    a, b = torch.ones(1000), torch.ones(10)
    watch = weakref.ref(a)
    a, b = notebook_launcher.utils.release_memory(a, b)
    gc.collect()
    assert (a, b) == (None, None) and watch() is None
    assert notebook_launcher.utils.release_memory() == accelerate.utils.release_memory() == []
