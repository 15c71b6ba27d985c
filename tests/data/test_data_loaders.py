"""Prepared loaders in one process: GradientState, epochs, skipping, workers, pickling."""

from __future__ import annotations

import inspect
import pickle

import pytest
import torch
from shard_laws import Numbers
from torch.utils.data import DataLoader, TensorDataset

from notebook_launcher import data as ours
from notebook_launcher.data import (
    DataLoaderDispatcher,
    DataLoaderShard,
    SkipBatchSampler,
    SkipDataLoader,
    prepare_data_loader,
    skip_first_batches,
)
from notebook_launcher.state import GradientState


def flags(loader):
    state = GradientState()
    return [(b.tolist(), state.end_of_dataloader, state.remainder) for b in loader]


def test_end_of_dataloader_and_remainder_follow_the_epoch():
    loader = prepare_data_loader(DataLoader(range(10), batch_size=2), None, 2, 0)
    assert flags(loader) == [([0, 1], False, 2), ([4, 5], False, 2), ([8, 9], True, 2)]
    assert loader.iteration == 1 and not GradientState().in_dataloader
    assert flags(loader)[-1] == ([8, 9], True, 2)  # flags start afresh each epoch
    dropping = prepare_data_loader(DataLoader(range(10), batch_size=2, drop_last=True), None, 2, 1)
    assert flags(dropping) == [([2, 3], False, -1), ([6, 7], True, -1)]


def test_break_unregisters_the_loader_at_once():
    state = GradientState()
    loader = prepare_data_loader(DataLoader(range(10), batch_size=2), None, 2, 0)
    for _ in loader:
        assert state.active_dataloader is loader
        break
    assert not state.in_dataloader and state.remainder == -1 and not state.end_of_dataloader
    assert loader.iteration == 0  # an interrupted epoch is not counted
    assert [end for _, end, _ in flags(loader)] == [False, False, True]


def test_nested_loaders():
    state = GradientState()
    outer = prepare_data_loader(DataLoader(range(4), batch_size=2), None, 2, 0)
    inner = prepare_data_loader(DataLoader(range(6), batch_size=1), None, 2, 1)
    seen = []
    for _ in outer:
        for _ in inner:
            seen.append(
                (
                    "inner",
                    state.active_dataloader is inner,
                    state.end_of_dataloader,
                    state.remainder,
                )
            )
        seen.append(
            ("outer", state.active_dataloader is outer, state.end_of_dataloader, state.remainder)
        )
    assert seen == [
        ("inner", True, False, 0),
        ("inner", True, False, 0),
        ("inner", True, True, 0),
        ("outer", True, True, 0),
    ]
    assert state.dataloader_references == [None]


def test_skip_first_batches_keeps_the_bookkeeping():
    for iterable in (False, True):
        data = Numbers(11) if iterable else list(range(11))
        loader = prepare_data_loader(DataLoader(data, batch_size=2), None, 2, 1)
        full = flags(loader)
        for skip in range(5):
            resumed = skip_first_batches(loader, skip)
            assert type(resumed) is DataLoaderShard
            assert flags(resumed) == full[skip:]  # same batches, same end flag and remainder
            assert len(resumed) == len(full[skip:])
            assert resumed.total_batch_size == 4 and resumed.total_dataset_length == 11
        twice = skip_first_batches(skip_first_batches(loader, 1), 1)
        assert flags(twice) == full[2:]


def test_skip_first_batches_of_plain_loaders():
    plain = skip_first_batches(DataLoader(range(7), batch_size=2), 2)
    assert type(plain) is DataLoader and isinstance(plain.batch_sampler, SkipBatchSampler)
    assert [b.tolist() for b in plain] == [[4, 5], [6]] and len(plain) == 2
    streamed = skip_first_batches(DataLoader(Numbers(7), batch_size=2), 2)
    assert type(streamed) is SkipDataLoader
    assert flags(streamed) == [([4, 5], False, 1), ([6], True, 1)]
    with pytest.raises(TypeError, match="dataloader=range"):
        skip_first_batches(range(3), 1)
    with pytest.raises(ValueError, match="num_batches=-1"):
        skip_first_batches(plain, -1)


def test_dispatcher_in_one_process():
    loader = prepare_data_loader(
        DataLoader(TensorDataset(torch.arange(5)), batch_size=2),
        put_on_device=True,
        dispatch_batches=True,
    )
    assert isinstance(loader, DataLoaderDispatcher)
    state = GradientState()
    seen = [(b[0].tolist(), state.end_of_dataloader, state.remainder) for b in loader]
    assert seen == [([0, 1], False, 1), ([2, 3], False, 1), ([4], True, 1)]
    assert len(loader) == 3 and loader.total_batch_size == 2 and loader.total_dataset_length == 5
    resumed = skip_first_batches(loader, 1)
    assert [b[0].tolist() for b in resumed] == [[2, 3], [4]] and len(resumed) == 2


def test_worker_processes_give_the_same_batches():
    original = DataLoader(
        range(22), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    for p in (0, 1):
        loader = prepare_data_loader(original, None, 2, p, use_seedable_sampler=True, data_seed=4)
        alone = [b.tolist() for b in loader]
        loader.set_epoch(0)
        workers = prepare_data_loader(
            DataLoader(range(22), batch_size=3, shuffle=True, num_workers=2),
            None,
            2,
            p,
            use_seedable_sampler=True,
            data_seed=4,
        )
        assert [b.tolist() for b in workers] == alone
        assert [end for _, end, _ in flags(workers)] == [False] * 3 + [True]
    streamed = prepare_data_loader(DataLoader(Numbers(9), batch_size=2, num_workers=1), None, 2, 1)
    assert [b.tolist() for b in streamed] == [[2, 3], [6, 7], [1, 2]]


def test_prepared_loaders_pickle():
    for loader in (
        prepare_data_loader(
            DataLoader(range(10), batch_size=2, shuffle=True), None, 2, 1, rng_types=["generator"]
        ),
        prepare_data_loader(DataLoader(Numbers(9), batch_size=2), None, 2, 0),
        prepare_data_loader(
            DataLoader(range(6), batch_size=2), put_on_device=True, dispatch_batches=True
        ),
        skip_first_batches(prepare_data_loader(DataLoader(range(10), batch_size=2), None, 2, 0), 1),
    ):
        loader.set_epoch(0)
        copy = pickle.loads(pickle.dumps(loader))
        loader.set_epoch(0)
        assert type(copy) is type(loader)
        assert [b.tolist() for b in copy] == [b.tolist() for b in loader]
        assert copy.total_batch_size == loader.total_batch_size and len(copy) == len(loader)


def test_loaders_check_their_arguments():
    with pytest.raises(TypeError, match="rng_types=\\['torch', 3\\] is not valid"):
        DataLoaderShard(range(3), rng_types=["torch", 3])
    with pytest.raises(TypeError, match="synchronized_generator=1"):
        DataLoaderShard(range(3), synchronized_generator=1)
    with pytest.raises(ValueError, match="skip_batches=-2"):
        DataLoaderShard(range(3), skip_batches=-2)
    with pytest.raises(TypeError, match="slice_fn=3"):
        DataLoaderDispatcher(range(3), slice_fn=3)
    with pytest.raises(ValueError, match="epoch=-1"):
        DataLoaderShard(range(3)).set_epoch(-1)
    with pytest.raises(TypeError, match="batch_sampler=None"):
        SkipBatchSampler(None)
    with pytest.raises(TypeError, match="dataloader=\\[1, 2\\] is not valid"):
        ours.get_sampler([1, 2])


def test_same_parameters_as_accelerate():
    import accelerate.data_loader as accelerate

    def shape(function):
        return [
            (p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()
        ]

    for name in (
        "BatchSamplerShard",
        "IterableDatasetShard",
        "DataLoaderShard",
        "DataLoaderDispatcher",
        "SkipBatchSampler",
        "SkipDataLoader",
        "prepare_data_loader",
        "skip_first_batches",
        "get_sampler",
    ):
        assert shape(getattr(ours, name)) == shape(getattr(accelerate, name)), name
