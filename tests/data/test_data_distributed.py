"""Prepared loaders in 2 real ranks started by notebook_launcher (gloo on CPU)."""

from __future__ import annotations

import pickle
from collections import Counter

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from notebook_launcher import notebook_launcher
from notebook_launcher.data import prepare_data_loader, skip_first_batches
from notebook_launcher.state import GradientState, PartialState


class Stream(IterableDataset):
    def __init__(self, length):
        self.length = length

    def __iter__(self):
        return iter(torch.arange(self.length).tolist())

    def __len__(self):
        return self.length


class Chunks(IterableDataset):
    """A stream of ready-made batches of the given sizes."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __iter__(self):
        return iter([torch.arange(size) for size in self.sizes])


def _values(loader):
    return [(b[0] if isinstance(b, (list, tuple)) else b).tolist() for b in loader]


def shuffling():
    state = PartialState()
    torch.manual_seed(1000 + state.process_index)  # unlike seeds: only synchronisation helps
    data = TensorDataset(torch.arange(23))
    seen = {}
    generator = prepare_data_loader(
        DataLoader(data, batch_size=3, shuffle=True), rng_types=["generator"]
    )
    seen["generator"] = [_values(generator) for _ in range(2)]
    seedable = prepare_data_loader(
        DataLoader(data, batch_size=3, shuffle=True),
        rng_types=["generator"],
        use_seedable_sampler=True,
    )
    seen["seedable"] = [_values(seedable) for _ in range(2)]
    workers = prepare_data_loader(
        DataLoader(data, batch_size=3, shuffle=True, num_workers=2),
        rng_types=["generator", "torch"],
    )
    seen["workers"] = [_values(workers) for _ in range(2)]
    seen["torch_after_sync"] = torch.rand(2).tolist()
    copy = pickle.loads(pickle.dumps(generator))
    seen["pickled"] = _values(copy) == _values(generator)  # synchronised again at each iteration
    generator.set_epoch(0)
    return seen, generator


def test_shuffled_orders_match_across_ranks_and_the_loader_comes_back():
    result = notebook_launcher(shuffling, num_processes=2)
    (rank0, loader0), (rank1, _) = result
    for key in ("generator", "seedable", "workers"):
        for epoch in (0, 1):
            both = rank0[key][epoch] + rank1[key][epoch]
            counts = Counter(x for batch in both for x in batch)
            assert set(counts) == set(range(23)), key  # one permutation shared by both ranks
            assert sum(counts.values()) == 24  # 23 samples + 1 to even out 4 batches per rank
            assert len(rank0[key][epoch]) == len(rank1[key][epoch]) == 4
        assert rank0[key][0] != rank0[key][1]  # a new order each epoch
    assert rank0["torch_after_sync"] == rank1["torch_after_sync"]
    assert rank0["pickled"] and rank1["pickled"]
    # The prepared loader of rank 0 came back to this process (pickled) and still works here.
    here = _values(loader0)
    assert len(here) == len(loader0) == 4 and all(len(batch) == 3 for batch in here)
    assert set(x for batch in here for x in batch) <= set(range(23))


def _real_samples(loader):
    """All ranks' samples of an epoch, gathered per step, padding cut off with the remainder."""
    state, real = GradientState(), []
    for batch in loader:
        values = batch[0] if isinstance(batch, (list, tuple)) else batch
        gathered = [torch.zeros_like(values) for _ in range(PartialState().num_processes)]
        dist.all_gather(gathered, values)
        step = torch.cat(gathered).tolist()
        if state.end_of_dataloader and state.remainder > 0:
            step = step[: state.remainder]
        real.extend(step)
    return real


def dispatching():
    report = {}
    for length in (11, 12):
        for split in (False, True):
            for drop_last in (False, True):
                for iterable in (False, True):
                    data = Stream(length) if iterable else TensorDataset(torch.arange(length))
                    original = DataLoader(data, batch_size=2, drop_last=drop_last)
                    key = (length, split, drop_last, iterable)
                    dispatched = prepare_data_loader(
                        original, put_on_device=True, dispatch_batches=True, split_batches=split
                    )
                    sharded = prepare_data_loader(original, split_batches=split)
                    report[key] = (
                        _values(dispatched),
                        _values(sharded),
                        _real_samples(dispatched),
                        _real_samples(sharded),
                        len(dispatched),
                    )
    tiny = DataLoader(TensorDataset(torch.arange(3)), batch_size=2, drop_last=True)
    report["tiny"] = _values(prepare_data_loader(tiny, put_on_device=True, dispatch_batches=True))
    records = [{"x": torch.tensor([i]), "name": f"n{i}"} for i in range(5)]
    mixed = prepare_data_loader(
        DataLoader(records, batch_size=2), put_on_device=True, dispatch_batches=True
    )
    report["mixed"] = [(b["x"].flatten().tolist(), b["name"]) for b in mixed]
    chunks = DataLoader(Chunks([3, 2, 2, 1]), batch_size=None)
    try:
        list(prepare_data_loader(chunks, put_on_device=True, dispatch_batches=True))
    except ValueError as error:  # raised on every rank alike, so no rank is left waiting
        report["uneven"] = str(error)
    return report


def test_dispatch_batches_delivers_the_data_sharding_does():
    rank0, rank1 = notebook_launcher(dispatching, num_processes=2)
    for key in [k for k in rank0 if isinstance(k, tuple)]:
        dispatched, sharded, real_d, real_s, length = rank0[key]
        size, split, drop_last, _ = key
        other = rank1[key]
        assert len(dispatched) == length and len(other[0]) == other[4], key
        expected = list(range(size // 4 * 4)) if drop_last and not split else list(range(size))
        if drop_last and split:
            expected = list(range(size // 2 * 2))
        assert real_d == real_s == other[2] == other[3] == expected, key  # each sample once
        if size % 4 == 0 or drop_last:  # no padding: the very same batches on each rank
            assert dispatched == sharded and other[0] == other[1], key
    assert rank0["tiny"] == rank1["tiny"] == []  # fewer full batches than ranks: nothing, no error
    assert rank0["mixed"] == [([0, 1], ["n0", "n1"]), ([4], ["n4"])]
    assert rank1["mixed"] == [([2, 3], ["n2", "n3"]), ([0], ["n0"])]
    for rank in (
        rank0,
        rank1,
    ):  # a middle batch that cannot be cut evenly is refused, not cut short
        assert "a batch of 5 samples cannot be cut into 2 equal pieces" in rank["uneven"]


def bookkeeping():
    state = GradientState()
    seen = {}
    loader = prepare_data_loader(DataLoader(TensorDataset(torch.arange(10)), batch_size=2))
    seen["flags"] = [(state.end_of_dataloader, state.remainder) for _ in loader]
    for _ in loader:
        break
    seen["after_break"] = (state.in_dataloader, state.end_of_dataloader, state.remainder)
    seen["second_epoch"] = [(state.end_of_dataloader, state.remainder) for _ in loader]
    inner = prepare_data_loader(DataLoader(TensorDataset(torch.arange(4)), batch_size=1))
    nested = []
    for _ in loader:
        nested += [("inner", state.end_of_dataloader, state.remainder) for _ in inner]
        nested.append(("outer", state.end_of_dataloader, state.remainder))
    seen["nested"] = nested
    seen["full"] = sorted(_real_samples(loader))
    seen["resumed"] = sorted(_real_samples(skip_first_batches(loader, 1)))
    return seen


def test_gradient_state_and_resumed_epochs_in_two_ranks():
    for seen in notebook_launcher(bookkeeping, num_processes=2):
        assert seen["flags"] == [(False, 2), (False, 2), (True, 2)]
        assert seen["after_break"] == (False, False, -1)
        assert seen["second_epoch"] == seen["flags"]
        assert seen["nested"][:3] == [("inner", False, 0), ("inner", True, 0), ("outer", False, 2)]
        assert seen["nested"][-1] == ("outer", True, 2)
        assert seen["full"] == list(range(10))  # the padding is cut off, nothing counted twice
        assert seen["resumed"] == list(range(4, 10))  # also after skip_first_batches
