"""What every sharding must satisfy, checked from the shards of all processes of one job."""

from __future__ import annotations

import itertools

from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler

from notebook_launcher.data import BatchSamplerShard, IterableDatasetShard


class Numbers(IterableDataset):
    """An iterable dataset of ``0 .. length - 1`` (sized unless ``sized=False``)."""

    def __init__(self, length, sized=True):
        self.length = length
        self.sized = sized

    def __iter__(self):
        return iter(range(self.length))

    def __len__(self):
        if not self.sized:
            raise TypeError("no length")
        return self.length


class Varying:
    """A batch sampler over consecutive indices with the given batch sizes (no batch_size)."""

    def __init__(self, sizes):
        starts = list(itertools.accumulate([0, *sizes]))
        self.batches = [list(range(a, b)) for a, b in itertools.pairwise(starts)]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


class Custom(BatchSampler):
    """A BatchSampler subclass: the shard reads it batch by batch (its general path)."""


def batch_sampler(length, batch_size, drop_last, kind=BatchSampler):
    """A batch sampler over 0 .. length - 1; ``kind="list"``: a BatchSampler over a plain list."""
    if kind == "list":
        return BatchSampler(list(range(length)), batch_size, drop_last)
    return kind(SequentialSampler(range(length)), batch_size, drop_last)


def sampler_shards(length, batch_size, n, split, drop_last, even, kind=BatchSampler):
    """Every process's list of batches (and each shard's len()) for one configuration."""
    shards = [
        BatchSamplerShard(batch_sampler(length, batch_size, drop_last, kind), n, p, split, even)
        for p in range(n)
    ]
    return [list(s) for s in shards], [len(s) for s in shards]


def interleave(shards):
    """The global order: round by round, the batches of process 0, 1, ... concatenated."""
    order = []
    for step in range(max(map(len, shards), default=0)):
        for shard in shards:
            if step < len(shard):
                order.extend(shard[step])
    return order


def expected_order(length, total, drop_last, pad):
    """Global order of a sharding of ``range(length)`` in global batches of ``total`` samples.

    ``drop_last``: only complete global batches. ``pad``: an incomplete last global batch is
    completed by cycling through the first global batch. Otherwise every sample once.
    """
    if drop_last:
        return list(range(length // total * total))
    if not pad or length % total == 0:
        return list(range(length))
    fill = itertools.cycle(range(min(length, total)))
    return list(range(length)) + [next(fill) for _ in range(total - length % total)]


def check_sampler_laws(length, batch_size, n, split, drop_last, even):
    shards, lengths = sampler_shards(length, batch_size, n, split, drop_last, even)
    for kind in (Custom, "list"):  # the general path, and a plain BatchSampler over a list
        assert sampler_shards(length, batch_size, n, split, drop_last, even, kind) == (
            shards,
            lengths,
        )
    assert lengths == [len(s) for s in shards]  # len() is exact on every process
    total = batch_size if split else batch_size * n
    assert interleave(shards) == expected_order(length, total, drop_last, even)
    if even or drop_last:
        assert len(set(lengths)) == 1  # same number of batches everywhere
        local = total // n
        assert all(len(b) == local for shard in shards for b in shard)  # all the same size
    else:
        assert max(lengths) - min(lengths) <= 1
    return shards


def iterable_shards(length, batch_size, n, split, drop_last, sized=True):
    shards = [
        IterableDatasetShard(Numbers(length, sized), batch_size, drop_last, n, p, split)
        for p in range(n)
    ]
    return shards, [list(s) for s in shards]


def check_iterable_laws(length, batch_size, n, split, drop_last):
    shards, samples = iterable_shards(length, batch_size, n, split, drop_last)
    total = batch_size if split else batch_size * n
    local = total // n
    assert [len(s) for s in shards] == [len(x) for x in samples]
    assert len({len(x) for x in samples}) == 1 and len(samples[0]) % local == 0
    batches = [[x[i : i + local] for i in range(0, len(x), local)] for x in samples]
    assert interleave(batches) == expected_order(length, total, drop_last, True)
    return samples
