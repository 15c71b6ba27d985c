"""Samplers: epoch-seeded shuffling, and a batch sampler's share for one process."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from ..utils.validation import check_bool, check_int, invalid


def _default_generator() -> torch.Generator:
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else "cpu"
    return torch.Generator(device=device)


def _permutations(sampler: RandomSampler, generator: torch.Generator) -> Iterator[int]:
    """The indices a ``RandomSampler`` without replacement draws from ``generator``.

    The same draws in the same order as its ``__iter__``, made up front and handed out by
    ``itertools`` without running Python code per index.
    """
    size = len(sampler.data_source)
    whole, rest = divmod(sampler.num_samples, size)
    parts = [torch.randperm(size, generator=generator).tolist() for _ in range(whole)]
    parts.append(torch.randperm(size, generator=generator).tolist()[:rest])
    return itertools.chain.from_iterable(parts)


def _sampler_indices(sampler: Any) -> Iterator[int]:
    """``iter(sampler)``, made cheaper per index for a plain ``RandomSampler``."""
    if type(sampler) is not RandomSampler or sampler.replacement:
        return iter(sampler)
    generator = sampler.generator
    if generator is None:  # as RandomSampler does: a fresh generator seeded from torch's
        generator = torch.Generator()
        generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
    return _permutations(sampler, generator)


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order depends only on a seed and the epoch.

    Each iteration reseeds the generator with ``initial_seed + epoch`` and then moves to the
    next epoch, so processes that share the seed draw the same order, and an epoch can be
    replayed (``set_epoch``) after a restart.

    Args:
        data_source: the dataset to sample from.
        replacement: draw with replacement.
        num_samples: how many indices to draw (default: ``len(data_source)``).
        generator: the ``torch.Generator`` to reseed (one is created if None).
        data_seed: the seed; default ``torch.random.initial_seed()`` at construction, which is
            the same on every process only after the same ``set_seed``/``torch.manual_seed``.

    Note:
        A data loader prepared with ``rng_types`` containing ``"generator"`` takes the seed of
        process 0 at the start of every iteration, so the order matches on every process even
        without seeding them alike; Accelerate relies on ``set_seed`` alone.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
    ) -> None:
        if data_seed is not None:
            check_int("data_seed", data_seed)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise invalid("generator", generator, "expected a torch.Generator or None", TypeError)
        super().__init__(data_source, replacement, num_samples, generator)
        self.initial_seed = data_seed if data_seed is not None else torch.random.initial_seed()
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = _default_generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        draws = super().__iter__() if self.replacement else _permutations(self, self.generator)
        return itertools.chain(draws, self._next_epoch())

    def _next_epoch(self) -> Iterator[int]:
        """Moves to the next epoch once the indices of this one are all used."""
        self.set_epoch(self.epoch + 1)
        yield from ()

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration."""
        self.epoch = check_int("epoch", epoch, 0)


def _uneven_batch_error(size: int, batch_size: int) -> ValueError:
    if size > batch_size:
        problem = f"a batch of {size} indices, more than its batch_size={batch_size}"
    else:
        problem = f"a batch of {size} indices (batch_size={batch_size}) that is not its last one"
    return ValueError(
        f"the batch sampler yielded {problem}: pieces of equal size cannot be made from it; "
        "pass even_batches=False (with split_batches=False) to shard a batch sampler whose batch "
        "sizes vary"
    )


class BatchSamplerShard(BatchSampler):
    """The batches of ``batch_sampler`` that belong to one process.

    With ``split_batches=False`` the batches are dealt out in turn: on 2 processes, from
    ``[[0, 1, 2, 3], [4, 5, 6, 7]]`` process 0 gets ``[0, 1, 2, 3]`` and process 1 gets
    ``[4, 5, 6, 7]``. With ``split_batches=True`` every batch is cut into one piece per process:
    process 0 gets ``[0, 1]`` then ``[4, 5]``, process 1 ``[2, 3]`` then ``[6, 7]``.

    With ``even_batches=True`` every process gets the same number of batches, all of the same
    size: the ``drop_last`` attribute of ``batch_sampler`` decides whether an incomplete last
    round (or last batch) is dropped or completed with indices from the start of the epoch.
    With ``even_batches=False`` nothing is added: the last batches may be short or missing on
    some processes.

    Args:
        batch_sampler: the batch sampler to shard (anything iterable over lists of indices;
            its ``batch_size`` and ``drop_last`` attributes are read when present).
        num_processes: how many processes share the batches.
        process_index: which of them this shard is for.
        split_batches: cut each batch into pieces rather than deal whole batches.
        even_batches: complete the end so that every process gets the same batches count.

    Raises:
        ValueError: ``split_batches=True`` without a ``batch_size`` that is a multiple of
            ``num_processes``; during iteration, with ``even_batches=True``, a batch before the
            last that is not full or any batch over ``batch_size`` (such batch samplers need
            ``even_batches=False``; a sampler with no ``batch_size`` may vary freely and is
            completed with whole batches from the start).

    Note:
        Unlike Accelerate, ``len()`` is exact with ``split_batches=True, even_batches=False``,
        batches of a varying-size sampler are never dropped silently, and ``split_batches=True``
        refuses a batch size of 1 on several processes.
    """

    def __init__(
        self,
        batch_sampler: BatchSampler,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        if not hasattr(batch_sampler, "__iter__"):
            raise invalid(
                "batch_sampler", batch_sampler, "expected an iterable of index lists", TypeError
            )
        check_int("num_processes", num_processes, 1)
        check_int("process_index", process_index, 0)
        if process_index >= num_processes:
            raise invalid(
                "process_index", process_index, f"expected 0 to {num_processes - 1} (num_processes)"
            )
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = check_bool("split_batches", split_batches)
        self.even_batches = check_bool("even_batches", even_batches)
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        if self.batch_size is not None:
            check_int("batch_sampler.batch_size", self.batch_size, 1)
        if split_batches and (self.batch_size is None or self.batch_size % num_processes):
            raise invalid(
                "split_batches",
                split_batches,
                f"a batch of batch_size={self.batch_size} cannot be cut into {num_processes} "
                "equal pieces: the batch size must be a multiple of num_processes",
            )

    @property
    def sampler(self) -> Any:
        """The sampler under the wrapped batch sampler (None if it has none)."""
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def total_length(self) -> int:
        """Batches of the wrapped batch sampler."""
        return len(self.batch_sampler)

    def __len__(self) -> int:
        total = len(self.batch_sampler)
        n, p = self.num_processes, self.process_index
        if self.split_batches:
            last = self._last_batch_size(total)
            short_piece = last is not None and last <= p * (self.batch_size // n)
            return total - 1 if short_piece and not self.even_batches else total
        if self.drop_last:
            return total // n
        if self.even_batches:
            return -(-total // n)
        return total // n + (1 if p < total % n else 0)

    def _last_batch_size(self, total: int) -> int | None:
        """Size of the last batch, where the wrapped sampler is a plain batching of a sized one."""
        if total == 0 or self.drop_last or not isinstance(self.batch_sampler, BatchSampler):
            return None
        try:
            last = len(self.batch_sampler.sampler) - (total - 1) * self.batch_size
        except (TypeError, AttributeError):
            return None
        return last if 0 < last <= self.batch_size else None

    def __iter__(self) -> Iterator[list[int]]:
        if type(self.batch_sampler) is BatchSampler:
            return self._iter_indices()
        return self._iter_split() if self.split_batches else self._iter_whole()

    def _iter_indices(self) -> Iterator[list[int]]:
        """The batches for a plain ``BatchSampler``, cut straight from its sampler's indices.

        Its batches are consecutive runs of ``batch_size`` indices, so whole rounds (all
        processes' batches, or one batch to split) are read and cut at once, in blocks that
        grow up to 64 rounds: the same batches as the general path, with next to no work per
        batch.
        """
        return itertools.chain.from_iterable(self._index_blocks())

    def _index_blocks(self) -> Iterator[list[list[int]]]:
        span = self.batch_size if self.split_batches else self.batch_size * self.num_processes
        local = span // self.num_processes
        low = self.process_index * local
        sampler = self.batch_sampler.sampler
        # A SequentialSampler's indices are a range: slices of it make only this process's.
        ranged = type(sampler) is SequentialSampler
        indices = iter(()) if ranged else _sampler_indices(sampler)
        total, read = (len(sampler.data_source), 0) if ranged else (0, 0)
        head: Any = None
        rounds = 1
        while True:
            if ranged:
                block: Any = range(read, min(read + span * rounds, total))
                read = block.stop
                complete = len(block) - len(block) % span
                starts = range(low, complete, span)
                yield [list(block[start : start + local]) for start in starts]
            else:
                block = [*itertools.islice(indices, span * rounds)]
                complete = len(block) - len(block) % span
                yield [block[start : start + local] for start in range(low, complete, span)]
            if head is None and complete:
                head = block[:span]
            if len(block) < span * rounds:
                break
            rounds = min(2 * rounds, 64)
        tail = list(block[complete:])
        if not tail or self.drop_last:
            return
        if self.even_batches:
            fill = itertools.cycle(head if head is not None else list(tail))
            tail += [next(fill) for _ in range(span - len(tail))]
            yield [tail[low : low + local]]
        elif len(tail) > low:
            yield [tail[low : low + local]]

    def _iter_split(self) -> Iterator[list[int]]:
        size = self.batch_size
        piece = size // self.num_processes
        low, high = self.process_index * piece, (self.process_index + 1) * piece
        head: list[int] | None = None
        held: Any = None  # a short batch, kept until it turns out to be the last
        for batch in self.batch_sampler:
            if held is not None:
                raise _uneven_batch_error(len(held), size)
            if len(batch) > size:
                raise _uneven_batch_error(len(batch), size)
            if head is None:
                head = list(batch)
            if len(batch) == size:
                yield batch[low:high]
            elif self.even_batches:
                held = batch
            elif not self.drop_last and len(batch) > low:
                yield batch[low:high]
        if held is not None and not self.drop_last:
            fill = itertools.cycle(head)
            completed = [*held, *(next(fill) for _ in range(size - len(held)))]
            yield completed[low:high]

    def _iter_whole(self) -> Iterator[list[int]]:
        n, size = self.num_processes, self.batch_size
        check_sizes = self.even_batches and size is not None
        pad = self.even_batches and not self.drop_last
        head: list[Any] = []  # the first round's batches, to complete the last round from
        pending: list[Any] = []  # the batches of the round being read
        short: int | None = None  # size of the short batch met so far
        for batch in self.batch_sampler:
            if check_sizes:
                if short is not None or len(batch) > size:
                    raise _uneven_batch_error(len(batch) if short is None else short, size)
                short = len(batch) if len(batch) < size else None
            if pad and len(head) < n:
                head.append(batch)
            pending.append(batch)
            if len(pending) == n and short is None:
                yield pending[self.process_index]
                pending = []
        if not pending or self.drop_last:
            return
        if not self.even_batches:
            if self.process_index < len(pending):
                yield pending[self.process_index]
            return
        yield self._complete_round(pending, head)[self.process_index]

    def _complete_round(self, pending: list[Any], head: list[Any]) -> list[Any]:
        """``pending`` made into ``num_processes`` full batches with data from ``head``."""
        n, size = self.num_processes, self.batch_size
        if size is None:  # batches vary in size: add whole batches from the start
            whole = itertools.cycle(head)
            return pending + [next(whole) for _ in range(n - len(pending))]
        fill = itertools.cycle([index for batch in head for index in batch])
        rounded = [
            *pending[:-1],
            [*pending[-1], *(next(fill) for _ in range(size - len(pending[-1])))],
        ]
        rounded += [[next(fill) for _ in range(size)] for _ in range(n - len(rounded))]
        return rounded
