"""prepare_data_loader in one process, simulating each process of a job with process_index."""

from __future__ import annotations

import itertools

import pytest
import torch
from shard_laws import Numbers, expected_order, interleave
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from notebook_launcher.data import (
    BatchSamplerShard,
    DataLoaderDispatcher,
    DataLoaderShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    prepare_data_loader,
)
from notebook_launcher.state import GradientState

GRID = [
    config
    for config in itertools.product(
        range(0, 14),
        range(1, 5),
        range(1, 4),
        (False, True),
        (False, True),
        (False, True),
        (False, True),
    )
    if not config[3] or config[1] % config[2] == 0
]


def rows(loader):
    """The batches of one epoch as lists, with GradientState's view while each was used."""
    state = GradientState()
    seen = []
    for batch in loader:
        seen.append((batch.tolist(), state.end_of_dataloader, state.remainder))
    assert not state.in_dataloader
    return seen


def test_every_small_configuration_shards_the_dataset():
    for length, batch_size, n, split, drop_last, even, iterable in GRID:
        config = (length, batch_size, n, split, drop_last, even, iterable)
        data = Numbers(length) if iterable else list(range(length))
        original = DataLoader(data, batch_size=batch_size, drop_last=drop_last)
        loaders = [
            prepare_data_loader(original, None, n, p, split, even_batches=even) for p in range(n)
        ]
        seen = [rows(loader) for loader in loaders]
        batches = [[b for b, _, _ in shard] for shard in seen]
        total = batch_size if split else batch_size * n
        # One process reads the loader as it is; iterable shards always complete the end.
        pad = (even or iterable) and n > 1
        assert interleave(batches) == expected_order(length, total, drop_last, pad), config
        assert [len(loader) for loader in loaders] == list(map(len, batches)), config
        remainder = -1 if drop_last else length % total
        for shard in seen:
            assert [end for _, end, _ in shard] == [i == len(shard) - 1 for i in range(len(shard))]
            assert {r for _, _, r in shard} <= {remainder}, config
        assert loaders[0].total_batch_size == total and loaders[0].total_dataset_length == length


def test_same_batches_as_accelerate():
    import accelerate.data_loader as accelerate

    for length, batch_size, n, split, drop_last, even, iterable in GRID[::5]:
        for p in range(n):
            data = Numbers(length) if iterable else list(range(length))
            original = DataLoader(data, batch_size=batch_size, drop_last=drop_last)
            ours = prepare_data_loader(original, None, n, p, split, even_batches=even)
            theirs = accelerate.prepare_data_loader(original, None, n, p, split, even_batches=even)
            assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]


def test_same_shuffled_batches_as_accelerate():
    import accelerate.data_loader as accelerate

    def shuffled(seed):
        return DataLoader(
            range(29), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(seed)
        )

    for n, p, seed in ((1, 0, 3), (2, 0, 1), (2, 1, 1), (3, 2, 7)):
        ours = prepare_data_loader(shuffled(seed), None, n, p)
        theirs = accelerate.prepare_data_loader(shuffled(seed), None, n, p)
        for _ in range(2):  # two epochs
            assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"use_seedable_sampler": True},
        {"use_seedable_sampler": True, "data_seed": 42},
        {"drop_last": True},
        {"split_batches": True},
        {"even_batches": False},
        {"generator": 5},
    ],
)
def test_shuffles_after_the_same_seed_are_bit_identical_to_accelerate(options):
    import accelerate.data_loader as accelerate
    from accelerate.utils import set_seed as their_set_seed

    from notebook_launcher import set_seed

    def epochs(prepare, seed_everything, n, p):
        kwargs = dict(options)
        generator = kwargs.pop("generator", None)
        if generator is not None:
            generator = torch.Generator().manual_seed(generator)
        drop_last = kwargs.pop("drop_last", False)
        seed_everything(1234)
        original = DataLoader(
            list(range(37)), batch_size=4, shuffle=True, generator=generator, drop_last=drop_last
        )
        loader = prepare(original, num_processes=n, process_index=p, **kwargs)
        seen = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            seen.append([b.tolist() for b in loader])
        return seen, torch.rand(2).tolist()  # the global generator is left as Accelerate leaves it

    for n in (1, 2, 4):
        for p in range(n):
            ours = epochs(prepare_data_loader, set_seed, n, p)
            assert ours == epochs(accelerate.prepare_data_loader, their_set_seed, n, p), (n, p)


def test_the_documented_example():
    original = DataLoader(range(8), batch_size=4)
    whole = [[b.tolist() for b in prepare_data_loader(original, None, 2, p)] for p in (0, 1)]
    assert whole == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    original = DataLoader(range(8), batch_size=4)
    pieces = [[b.tolist() for b in prepare_data_loader(original, None, 2, p, True)] for p in (0, 1)]
    assert pieces == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]


class Records(torch.utils.data.Dataset):
    """Samples mixing tensors and other values."""

    def __len__(self):
        return 6

    def __getitem__(self, index):
        return {"x": torch.tensor([index, -index]), "name": f"s{index}", "pair": (index, "tag")}


def test_dict_and_tuple_batches_with_non_tensor_fields():
    original = DataLoader(Records(), batch_size=2)
    loader = prepare_data_loader(original, "cpu", 2, 1, put_on_device=True)
    batches = list(loader)
    assert [b["name"] for b in batches] == [["s2", "s3"], ["s0", "s1"]]  # padded from the start
    assert batches[0]["x"].tolist() == [[2, -2], [3, -3]]
    assert batches[0]["pair"][0].tolist() == [2, 3] and batches[0]["pair"][1] == ("tag", "tag")


class IndexBatches(torch.utils.data.Dataset):
    """A dataset read a whole list of indices at a time (as a BatchSampler given as sampler)."""

    def __len__(self):
        return 10

    def __getitem__(self, indices):
        return torch.tensor(indices) * 10


def test_custom_samplers_and_batch_samplers():
    bucket = [[0, 1, 2], [3], [4, 5], [6, 7, 8, 9]]
    custom = DataLoader(range(10), batch_sampler=bucket)
    shards = [[b.tolist() for b in prepare_data_loader(custom, None, 2, p)] for p in (0, 1)]
    assert shards == [[[0, 1, 2], [4, 5]], [[3], [6, 7, 8, 9]]]
    as_sampler = DataLoader(
        IndexBatches(),
        sampler=BatchSampler(SequentialSampler(range(10)), 4, False),
        batch_size=None,
    )
    loader = prepare_data_loader(as_sampler, None, 2, 1)
    assert [b.tolist() for b in loader] == [[40, 50, 60, 70], [20, 30, 40, 50]]
    assert loader.total_batch_size == 8 and len(loader) == 2
    subset = DataLoader(range(10), sampler=[9, 7, 5, 3, 1], batch_size=2)
    assert [b.tolist() for b in prepare_data_loader(subset, None, 2, 0)] == [[9, 7], [1, 9]]


def test_iterable_dataset_without_batching():
    original = DataLoader(Numbers(5), batch_size=None)
    shards = [[int(x) for x in prepare_data_loader(original, None, 2, p)] for p in (0, 1)]
    assert shards == [[0, 2, 4], [1, 3, 0]]


def test_the_callers_objects_are_left_alone_and_its_generator_is_shared():
    generator = torch.Generator().manual_seed(3)
    original = DataLoader(range(12), batch_size=3, shuffle=True, generator=generator)
    sampler, batch_sampler = original.sampler, original.batch_sampler
    expected = [
        b.tolist()
        for b in DataLoader(
            range(12), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(3)
        )
    ]
    rng_types = ["generator", "torch"]
    loader = prepare_data_loader(
        original, None, 2, 0, rng_types=rng_types, use_seedable_sampler=False
    )
    first = [b.tolist() for b in loader]
    list(loader)
    assert rng_types == ["generator", "torch"]
    assert original.sampler is sampler and original.batch_sampler is batch_sampler
    assert batch_sampler.sampler is sampler and sampler.generator is generator
    # Shared, as in Accelerate: seeding the caller's generator after prepare takes effect.
    assert loader.get_sampler().generator is generator and loader.generator is generator
    generator.manual_seed(3)
    assert [b.tolist() for b in loader] == first
    generator.manual_seed(3)
    assert [b.tolist() for b in original] == expected
    unseeded = DataLoader(range(12), batch_size=3, shuffle=True)
    prepare_data_loader(unseeded, None, 2, 0, use_seedable_sampler=True)
    assert unseeded.sampler.generator is None and type(unseeded.sampler) is RandomSampler


def test_seedable_sampler_replaces_the_random_sampler():
    original = DataLoader(range(12), batch_size=3, shuffle=True)
    loaders = [
        prepare_data_loader(original, None, 2, p, use_seedable_sampler=True, data_seed=11)
        for p in (0, 1)
    ]
    assert isinstance(loaders[0].get_sampler(), SeedableRandomSampler)
    epochs = [[[b.tolist() for b in loader] for _ in range(2)] for loader in loaders]
    for epoch in (0, 1):
        together = sorted(x for shard in epochs for b in shard[epoch] for x in b)
        assert together == list(range(12))  # both processes drew the same order
    assert epochs[0][0] != epochs[0][1]
    loaders[0].set_epoch(0)
    assert [b.tolist() for b in loaders[0]] == epochs[0][0]


def test_generators_are_kept_in_the_loader():
    original = DataLoader(range(8), batch_size=2, shuffle=True)
    loader = prepare_data_loader(original, None, 2, 0, rng_types=["generator"])
    assert loader.rng_types == ["generator"]
    assert loader.synchronized_generator is loader.get_sampler().generator is not None
    plain = prepare_data_loader(
        DataLoader(range(8), batch_size=2), None, 2, 0, rng_types=["generator"]
    )
    assert plain.rng_types == [] and plain.synchronized_generator is None


def test_dispatch_and_placement_choices():
    iterable = DataLoader(Numbers(6), batch_size=2)
    assert isinstance(prepare_data_loader(iterable, put_on_device=True), DataLoaderDispatcher)
    sharded = prepare_data_loader(iterable, num_processes=2, process_index=0)
    assert isinstance(sharded, DataLoaderShard) and sharded.device is None
    assert isinstance(sharded.dataset, IterableDatasetShard)
    placed = prepare_data_loader(DataLoader(range(4), batch_size=2), put_on_device=True)
    assert placed.device == torch.device("cpu")
    assert isinstance(placed.batch_sampler, BatchSampler)
    assert not isinstance(placed.batch_sampler, BatchSamplerShard)  # one process: no shard


def test_arguments_are_checked():
    loader = DataLoader(range(8), batch_size=4)
    cases = [
        (TypeError, "dataloader=\\[1\\] is not valid", dict(dataloader=[1])),
        (TypeError, "device=3.5", dict(device=3.5)),
        (ValueError, "num_processes=0", dict(num_processes=0)),
        (
            ValueError,
            "process_index=2 is not valid: expected 0 to 1",
            dict(num_processes=2, process_index=2),
        ),
        (TypeError, "split_batches='no'", dict(split_batches="no")),
        (TypeError, "put_on_device=1", dict(put_on_device=1)),
        (TypeError, "dispatch_batches='yes'", dict(dispatch_batches="yes")),
        (TypeError, "rng_types='torch'", dict(rng_types="torch")),
        (ValueError, "rng_types=\\['dice'\\]", dict(rng_types=["dice"])),
        (TypeError, "slice_fn_for_dispatch=1", dict(slice_fn_for_dispatch=1)),
        (TypeError, "data_seed=1.5", dict(data_seed=1.5)),
        (TypeError, "even_batches=None", dict(even_batches=None)),
        (ValueError, "needs put_on_device=True", dict(dispatch_batches=True)),
        (
            ValueError,
            "batch size must be a multiple of num_processes=3",
            dict(num_processes=3, process_index=0, split_batches=True),
        ),
        (TypeError, "use_stateful_dataloader=1", dict(use_stateful_dataloader=1)),
        (NotImplementedError, "torch_device_mesh", dict(torch_device_mesh=object())),
    ]
    for error, message, kwargs in cases:
        with pytest.raises(error, match=message):
            prepare_data_loader(**{"dataloader": loader, **kwargs})
    with pytest.raises(ValueError, match="batch size must be a multiple of num_processes=2"):
        prepare_data_loader(DataLoader(Numbers(4), batch_size=1), None, 2, 0, split_batches=True)
    with pytest.raises(ValueError, match="follows the job's processes"):
        prepare_data_loader(loader, None, 2, 0, put_on_device=True, dispatch_batches=True)
    with pytest.raises(ValueError, match="batch_size=None and no batch sampler cannot be sharded"):
        prepare_data_loader(DataLoader(range(4), batch_size=None), None, 2, 0)
