"""IterableDatasetShard: one process's share of an iterable dataset."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset

from ..utils.validation import check_bool, check_int, invalid


class IterableDatasetShard(IterableDataset):
    """The samples of an iterable dataset that belong to one process.

    The samples are read in global batches of ``batch_size * num_processes`` samples
    (``batch_size`` with ``split_batches=True``), and each process takes its own contiguous piece
    of every global batch: on 2 processes with ``batch_size=2``, from ``0, 1, ..., 7`` process 0
    gets ``0, 1, 4, 5`` and process 1 gets ``2, 3, 6, 7``. An incomplete last global batch is
    dropped (``drop_last=True``) or completed with samples from the first global batch, so
    every process gets the same number of samples, a multiple of its batch size.

    Args:
        dataset: the iterable dataset to shard.
        batch_size: samples per batch on each process, or per global batch with
            ``split_batches=True``.
        drop_last: drop an incomplete last global batch instead of completing it.
        num_processes: how many processes share the samples.
        process_index: which of them this shard is for.
        split_batches: ``batch_size`` is the global batch size, cut into ``num_processes``
            pieces.

    Raises:
        ValueError: ``split_batches=True`` and a ``batch_size`` that is not a multiple of
            ``num_processes``.

    Note:
        Unlike Accelerate, ``split_batches=True, batch_size=1`` on several processes is refused
        (Accelerate yields no sample at all), ``len()`` is right with ``split_batches=True``, and
        iterating before any ``set_epoch`` works.
    """

    def __init__(
        self,
        dataset: IterableDataset,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
    ) -> None:
        if not hasattr(dataset, "__iter__"):
            raise invalid("dataset", dataset, "expected an iterable dataset", TypeError)
        check_int("batch_size", batch_size, 1)
        check_int("num_processes", num_processes, 1)
        check_int("process_index", process_index, 0)
        if process_index >= num_processes:
            raise invalid(
                "process_index", process_index, f"expected 0 to {num_processes - 1} (num_processes)"
            )
        if check_bool("split_batches", split_batches) and batch_size % num_processes:
            raise invalid(
                "batch_size",
                batch_size,
                f"with split_batches=True each global batch is cut into {num_processes} equal "
                "pieces, so batch_size must be a multiple of num_processes",
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = check_bool("drop_last", drop_last)
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.epoch = 0

    @property
    def global_batch_size(self) -> int:
        """Samples read for one batch on every process."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def local_batch_size(self) -> int:
        """Samples of each global batch that go to this process."""
        return self.global_batch_size // self.num_processes

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and pass it on to the dataset if it has ``set_epoch``."""
        self.epoch = check_int("epoch", epoch, 0)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        try:
            total = len(self.dataset)
        except TypeError:
            raise TypeError(f"{type(self.dataset).__name__} has no len(), so its shard has none")
        full, rest = divmod(total, self.global_batch_size)
        batches = full if self.drop_last or not rest else full + 1
        return batches * self.local_batch_size

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            # Same shuffle on every process: the epoch is the seed.
            generator.manual_seed(self.epoch)
        # One global batch is read at a time; its samples are handed out without Python code
        # running per sample.
        return itertools.chain.from_iterable(self._pieces())

    def _pieces(self) -> Iterator[list[Any]]:
        """This process's piece of each global batch."""
        size, local = self.global_batch_size, self.local_batch_size
        low = self.process_index * local
        samples = iter(self.dataset)
        head: list[Any] | None = None
        while True:
            current = [*itertools.islice(samples, size)]
            if len(current) < size:
                break
            if head is None:
                head = current
            yield current[low : low + local]
        if current and not self.drop_last:
            fill = itertools.cycle(head if head is not None else list(current))
            current += [next(fill) for _ in range(size - len(current))]
            yield current[low : low + local]
