"""The sharding laws on larger random configurations (hypothesis)."""

from __future__ import annotations

from collections import Counter

import hypothesis
from shard_laws import Varying, check_iterable_laws, check_sampler_laws, interleave
from torch.utils.data import DataLoader

from notebook_launcher.data import BatchSamplerShard, prepare_data_loader

st = hypothesis.strategies
settings = hypothesis.settings(max_examples=150, deadline=None)


@st.composite
def configurations(draw, even=True):
    n = draw(st.integers(1, 8))
    split = draw(st.booleans())
    batch_size = draw(st.integers(1, 6)) * n if split else draw(st.integers(1, 16))
    length = draw(st.integers(0, 400))
    return length, batch_size, n, split, draw(st.booleans()), draw(st.booleans()) if even else True


@settings
@hypothesis.given(configurations())
def test_batch_sampler_shards_keep_the_laws(config):
    check_sampler_laws(*config)


@settings
@hypothesis.given(configurations(even=False))
def test_iterable_shards_keep_the_laws(config):
    length, batch_size, n, split, drop_last, _ = config
    check_iterable_laws(length, batch_size, n, split, drop_last)


@settings
@hypothesis.given(st.lists(st.integers(1, 9), max_size=40), st.integers(1, 6), st.booleans())
def test_varying_batch_sizes_lose_nothing(sizes, n, even):
    sampler = Varying(sizes)
    shards = [list(BatchSamplerShard(sampler, n, p, even_batches=even)) for p in range(n)]
    assert [len(BatchSamplerShard(sampler, n, p, even_batches=even)) for p in range(n)] == list(
        map(len, shards)
    )
    order = interleave(shards)
    assert order[: sum(sizes)] == list(range(sum(sizes)))  # every sample once, in order
    if even:
        assert len({len(s) for s in shards}) == 1
        extra = Counter(order[sum(sizes) :])
        assert all(index < sum(sizes[:n]) for index in extra)  # padding comes from the start
    else:
        assert len(order) == sum(sizes)


@settings
@hypothesis.given(
    st.integers(1, 200), st.integers(1, 12), st.integers(1, 5), st.booleans(), st.integers(0, 99)
)
def test_shuffled_epochs_cover_the_dataset_on_every_process_together(
    length, batch_size, n, drop_last, seed
):
    original = DataLoader(range(length), batch_size=batch_size, shuffle=True, drop_last=drop_last)
    loaders = [
        prepare_data_loader(original, None, n, p, use_seedable_sampler=True, data_seed=seed)
        for p in range(n)
    ]
    for _ in range(2):
        shards = [[b.tolist() for b in loader] for loader in loaders]
        seen = [x for shard in shards for batch in shard for x in batch]
        counts = Counter(seen)
        if drop_last:
            assert len(seen) == length // (batch_size * n) * batch_size * n
            assert set(counts.values()) <= {1}
        else:
            assert set(counts) == set(range(length))  # nothing lost
            assert len(seen) - length < batch_size * n  # padding is less than a global batch
        assert len({len(s) for s in shards}) <= 1
