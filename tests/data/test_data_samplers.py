"""BatchSamplerShard and SeedableRandomSampler, checked on every small configuration."""

from __future__ import annotations

import itertools

import pytest
import torch
from shard_laws import Varying, batch_sampler, check_sampler_laws, sampler_shards
from torch.utils.data import BatchSampler, RandomSampler

from notebook_launcher.data import BatchSamplerShard, SeedableRandomSampler

GRID = [
    (length, batch_size, n, split, drop_last, even)
    for length, batch_size, n, split, drop_last, even in itertools.product(
        range(0, 25), range(1, 7), range(1, 5), (False, True), (False, True), (False, True)
    )
    if not split or batch_size % n == 0
]


def test_every_small_configuration_keeps_the_laws():
    for config in GRID:
        try:
            check_sampler_laws(*config)
        except AssertionError as failure:
            raise AssertionError(
                f"(length, batch_size, n, split, drop_last, even)={config}"
            ) from failure


def test_same_batches_as_accelerate():
    import accelerate.data_loader as data_loader

    for length, batch_size, n, split, drop_last, even in GRID[::3]:
        for p in range(n):
            sampler = batch_sampler(length, batch_size, drop_last)
            ours = list(BatchSamplerShard(sampler, n, p, split, even))
            theirs = list(data_loader.BatchSamplerShard(sampler, n, p, split, even))
            assert ours == theirs, (length, batch_size, n, p, split, drop_last, even)


def test_the_documented_example():
    sampler = batch_sampler(8, 4, False)
    assert sampler_shards(8, 4, 2, False, False, True)[0] == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    assert [list(BatchSamplerShard(sampler, 2, p, split_batches=True)) for p in (0, 1)] == [
        [[0, 1], [4, 5]],
        [[2, 3], [6, 7]],
    ]


def test_len_is_exact_with_split_batches_and_uneven_ends():
    # 10 samples in batches of 4 split over 2: the last batch [8, 9] only reaches process 0.
    shards, lengths = sampler_shards(10, 4, 2, True, False, False)
    assert shards == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]]
    assert lengths == [3, 2]
    import accelerate.data_loader as accelerate

    theirs = accelerate.BatchSamplerShard(batch_sampler(10, 4, False), 2, 1, True, False)
    assert len(theirs) == 3 and len(list(theirs)) == 2  # what we do not copy


def test_fewer_samples_than_one_round_are_repeated():
    shards, _ = sampler_shards(3, 2, 3, False, False, True)
    assert shards == [[[0, 1]], [[2, 0]], [[1, 2]]]
    shards, _ = sampler_shards(1, 4, 2, True, False, True)
    assert shards == [[[0, 0]], [[0, 0]]]


def test_varying_batch_sizes_are_dealt_out_whole():
    sampler = Varying([3, 1, 2, 4, 2])
    even = [list(BatchSamplerShard(sampler, 2, p)) for p in (0, 1)]
    assert even == [[[0, 1, 2], [4, 5], [10, 11]], [[3], [6, 7, 8, 9], [0, 1, 2]]]
    uneven = [list(BatchSamplerShard(sampler, 2, p, even_batches=False)) for p in (0, 1)]
    assert uneven == [[[0, 1, 2], [4, 5], [10, 11]], [[3], [6, 7, 8, 9]]]
    assert [len(BatchSamplerShard(sampler, 2, p, even_batches=False)) for p in (0, 1)] == [3, 2]


class Declared(Varying):
    """Varying batches under a declared batch_size, as some bucketing samplers do."""

    batch_size = 2
    drop_last = False


def test_declared_batch_size_with_varying_batches_is_refused_unless_uneven():
    sampler = Declared([2, 1, 2])
    with pytest.raises(
        ValueError, match="batch of 1 indices .* not its last one.*even_batches=False"
    ):
        list(BatchSamplerShard(sampler, 2, 0))
    with pytest.raises(ValueError, match="not its last one"):
        list(BatchSamplerShard(sampler, 2, 0, split_batches=True))
    with pytest.raises(ValueError, match="batch of 3 indices, more than its batch_size=2"):
        list(BatchSamplerShard(Declared([2, 3]), 1, 0))
    shards = [list(BatchSamplerShard(sampler, 2, p, even_batches=False)) for p in (0, 1)]
    assert shards == [[[0, 1], [3, 4]], [[2]]]
    pieces = [list(BatchSamplerShard(sampler, 2, p, True, False)) for p in (0, 1)]
    assert pieces == [[[0], [2], [3]], [[1], [4]]]  # nothing lost


def test_arguments_are_checked():
    sampler = batch_sampler(8, 4, False)
    with pytest.raises(TypeError, match="batch_sampler=3 is not valid"):
        BatchSamplerShard(3)
    with pytest.raises(ValueError, match="num_processes=0 is not valid"):
        BatchSamplerShard(sampler, 0)
    with pytest.raises(ValueError, match=r"process_index=2 is not valid: expected 0 to 1"):
        BatchSamplerShard(sampler, 2, 2)
    with pytest.raises(TypeError, match="split_batches='yes'"):
        BatchSamplerShard(sampler, 2, 0, "yes")
    with pytest.raises(TypeError, match="even_batches=None"):
        BatchSamplerShard(sampler, 2, 0, False, None)
    with pytest.raises(ValueError, match="batch_size=4 cannot be cut into 3 equal pieces"):
        BatchSamplerShard(sampler, 3, 0, split_batches=True)
    with pytest.raises(ValueError, match="batch_size=None cannot be cut"):
        BatchSamplerShard(Varying([2]), 2, 0, split_batches=True)
    with pytest.raises(ValueError, match="batch_size=1 cannot be cut into 2"):
        BatchSamplerShard(batch_sampler(8, 1, False), 2, 0, split_batches=True)


def test_shard_exposes_what_loaders_read():
    sampler = batch_sampler(10, 3, True)
    shard = BatchSamplerShard(sampler, 2, 1)
    assert isinstance(shard, BatchSampler)
    assert (shard.batch_size, shard.drop_last, shard.total_length) == (3, True, 3)
    assert shard.sampler is sampler.sampler


def test_seedable_sampler_depends_on_seed_and_epoch_only():
    data = range(20)
    first = SeedableRandomSampler(data, data_seed=7)
    torch.manual_seed(123)  # the global generator plays no part
    second = SeedableRandomSampler(data, data_seed=7)
    epoch0 = list(first)
    assert sorted(epoch0) == list(data)
    assert list(second) == epoch0
    assert first.epoch == 1 and list(first) != epoch0  # moves to the next epoch
    first.set_epoch(0)
    assert list(first) == epoch0
    assert isinstance(first, RandomSampler)


def test_seedable_sampler_defaults_to_the_initial_seed():
    torch.manual_seed(5)
    assert SeedableRandomSampler(range(4)).initial_seed == 5
    with pytest.raises(TypeError, match="data_seed='1'"):
        SeedableRandomSampler(range(4), data_seed="1")
    with pytest.raises(TypeError, match="generator=3"):
        SeedableRandomSampler(range(4), generator=3)
    with pytest.raises(ValueError, match="epoch=-1"):
        SeedableRandomSampler(range(4)).set_epoch(-1)


def test_random_batches_are_the_ones_random_sampler_draws():
    for size, num_samples in ((10, None), (7, 20), (5, 3), (1, None)):
        for seeded in (True, False):
            torch.manual_seed(3)
            generator = torch.Generator().manual_seed(5) if seeded else None
            vanilla = RandomSampler(range(size), num_samples=num_samples, generator=generator)
            expected = [list(b) for b in BatchSampler(vanilla, 2, False)]
            after = torch.rand(1)
            torch.manual_seed(3)
            generator = torch.Generator().manual_seed(5) if seeded else None
            sampler = RandomSampler(range(size), num_samples=num_samples, generator=generator)
            shard = BatchSamplerShard(BatchSampler(sampler, 2, False), even_batches=False)
            assert list(shard) == expected
            assert torch.equal(torch.rand(1), after)  # the global generator moved alike


def test_seedable_sampler_draws_as_accelerate_does():
    import accelerate.data_loader as accelerate

    for replacement in (False, True):
        ours = SeedableRandomSampler(range(13), replacement, data_seed=9)
        theirs = accelerate.SeedableRandomSampler(range(13), replacement=replacement, data_seed=9)
        for _ in range(3):  # three epochs
            assert list(ours) == list(theirs) and ours.epoch == theirs.epoch
