"""IterableDatasetShard on every small configuration, and its edge cases."""

from __future__ import annotations

import itertools

import pytest
import torch
from shard_laws import Numbers, check_iterable_laws, iterable_shards

from notebook_launcher.data import IterableDatasetShard

GRID = [
    config
    for config in itertools.product(
        range(0, 25), range(1, 7), range(1, 5), (False, True), (False, True)
    )
    if not config[3] or config[1] % config[2] == 0
]


def test_every_small_configuration_keeps_the_laws():
    for config in GRID:
        try:
            check_iterable_laws(*config)
        except AssertionError as failure:
            raise AssertionError(f"(length, batch_size, n, split, drop_last)={config}") from failure


def test_same_samples_as_accelerate():
    import accelerate.data_loader as data_loader

    for length, batch_size, n, split, drop_last in GRID[::3]:
        for p in range(n):
            ours = list(IterableDatasetShard(Numbers(length), batch_size, drop_last, n, p, split))
            theirs = data_loader.IterableDatasetShard(
                Numbers(length), batch_size, drop_last, n, p, split
            )
            theirs.set_epoch(0)  # Accelerate's shard fails without it
            assert ours == list(theirs), (length, batch_size, n, p, split, drop_last)


def test_the_documented_example():
    _, split = iterable_shards(8, 4, 2, True, False)
    _, whole = iterable_shards(8, 4, 2, False, False)
    assert whole == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_split_batches_with_batch_size_one_is_refused_not_emptied():
    with pytest.raises(ValueError, match="batch_size=1 is not valid: with split_batches=True"):
        IterableDatasetShard(Numbers(8), batch_size=1, num_processes=2, split_batches=True)
    assert list(IterableDatasetShard(Numbers(3), 1, split_batches=True)) == [0, 1, 2]


def test_len_is_right_with_split_batches():
    shards, samples = iterable_shards(12, 4, 2, True, False)
    assert [len(s) for s in shards] == [len(x) for x in samples] == [6, 6]
    with pytest.raises(TypeError, match="Numbers has no len"):
        len(IterableDatasetShard(Numbers(4, sized=False), 2, num_processes=2))


class Shuffled(torch.utils.data.IterableDataset):
    """Shuffles with its own generator and has no set_epoch: the shard seeds it per epoch."""

    def __init__(self):
        self.generator = torch.Generator()

    def __iter__(self):
        return iter(torch.randperm(8, generator=self.generator).tolist())


class WithEpoch(Numbers):
    epoch = None

    def set_epoch(self, epoch):
        self.epoch = epoch


def test_epochs_seed_the_dataset_or_reach_it():
    shard = IterableDatasetShard(Shuffled(), 2, num_processes=2, process_index=1)
    twin = IterableDatasetShard(Shuffled(), 2, num_processes=2, process_index=0)
    first, other = list(shard), list(twin)  # works before any set_epoch
    assert sorted(first + other) == list(range(8))  # same order on both
    shard.set_epoch(1)
    assert list(shard) != first
    shard.set_epoch(0)
    assert list(shard) == first
    with_epoch = IterableDatasetShard(WithEpoch(4))
    with_epoch.set_epoch(3)
    assert with_epoch.dataset.epoch == 3 and with_epoch.epoch == 3


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="dataset=5 is not valid"):
        IterableDatasetShard(5)
    with pytest.raises(ValueError, match="batch_size=0"):
        IterableDatasetShard(Numbers(2), batch_size=0)
    with pytest.raises(TypeError, match="drop_last=1"):
        IterableDatasetShard(Numbers(2), drop_last=1)
    with pytest.raises(ValueError, match="process_index=3 is not valid: expected 0 to 2"):
        IterableDatasetShard(Numbers(2), num_processes=3, process_index=3)
    with pytest.raises(ValueError, match="batch_size=3 is not valid: with split_batches"):
        IterableDatasetShard(Numbers(2), batch_size=3, num_processes=2, split_batches=True)
