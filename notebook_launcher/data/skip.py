"""Skipping the first batches of an epoch, to resume a run in the middle of one."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from ..state.partial import PartialState
from ..utils.validation import check_int, invalid
from .dispatch import DataLoaderDispatcher
from .loaders import DataLoaderShard, index_batches, loader_kwargs
from .xla_loader import load_through_mp_device_loader, routes_through_mp_device_loader


class SkipBatchSampler(BatchSampler):
    """The batches of ``batch_sampler`` after the first ``skip_batches``.

    ``batch_size``, ``drop_last`` and ``sampler`` are those of the wrapped batch sampler.

    Args:
        batch_sampler: the batch sampler to read.
        skip_batches: how many batches to leave out at the start.
    """

    def __init__(self, batch_sampler: Any, skip_batches: int = 0) -> None:
        if not hasattr(batch_sampler, "__iter__"):
            raise invalid(
                "batch_sampler", batch_sampler, "expected an iterable of index lists", TypeError
            )
        self.batch_sampler = batch_sampler
        self.skip_batches = check_int("skip_batches", skip_batches, 0)

    batch_size = property(lambda self: getattr(self.batch_sampler, "batch_size", None))
    drop_last = property(lambda self: getattr(self.batch_sampler, "drop_last", False))
    sampler = property(lambda self: getattr(self.batch_sampler, "sampler", None))

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batch_sampler), self.skip_batches, None)

    @property
    def total_length(self) -> int:
        """Batches of the wrapped batch sampler, skipped ones included."""
        return len(self.batch_sampler)

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip_batches)


class SkipDataLoader(DataLoaderShard):
    """A ``DataLoader`` that leaves out the first ``skip_batches`` batches of each iteration.

    The batches are still read (use :func:`skip_first_batches`, which skips indices without
    loading them where it can).

    Args:
        dataset: the dataset.
        skip_batches: how many batches to leave out.
        use_stateful_dataloader: not supported (NotImplementedError).
        **kwargs: ``DataLoader`` arguments.

    Note:
        Unlike Accelerate, it flags the last batch (``end_of_dataloader``) and knows its
        remainder, like the other loaders here.
    """

    def __init__(
        self,
        dataset: Any,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            dataset,
            skip_batches=skip_batches,
            use_stateful_dataloader=use_stateful_dataloader,
            _drop_last=kwargs.get("drop_last", False) is True,
            **kwargs,
        )


def _sampling(dataloader: DataLoader, skip: int) -> tuple[dict[str, Any], int]:
    """How the new loader samples, and how many batches it must still skip by reading them.

    Map-style loaders skip indices (nothing is loaded); the others skip whole batches.
    """
    batches = index_batches(dataloader)
    if isinstance(dataloader.dataset, IterableDataset) or batches is None:
        sampling = {"batch_size": dataloader.batch_size, "drop_last": dataloader.drop_last}
        if batches is None and not isinstance(dataloader.dataset, IterableDataset):
            sampling["sampler"] = dataloader.sampler
        return sampling, skip
    skipped = SkipBatchSampler(batches, skip)
    if isinstance(dataloader.sampler, BatchSampler):
        return {"sampler": skipped, "batch_size": dataloader.batch_size}, 0
    return {"batch_sampler": skipped}, 0


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader like ``dataloader`` whose iterations start after its first ``num_batches`` batches.

    For resuming in the middle of an epoch. The new loader keeps the device, random
    synchronisation, epoch, ``drop_last`` and sharding of a prepared loader, so ``remainder``
    and ``end_of_dataloader`` (hence a later ``gather_for_metrics``) stay right.

    Args:
        dataloader: a loader from :func:`prepare_data_loader`, or a plain ``DataLoader``.
        num_batches: batches (as this process sees them) to skip.

    Returns:
        The new loader (same class as ``dataloader`` for the prepared ones).

    Raises:
        TypeError: ``dataloader`` is not a DataLoader, or ``num_batches`` not an int.
        ValueError: ``num_batches`` is negative.

    Example:
        >>> resumed = skip_first_batches(train_loader, num_batches=120)

    Note:
        Unlike Accelerate, the skipped loader keeps ``drop_last`` and the total batch size
        (Accelerate loses them, so ``gather_for_metrics`` then counts padded samples twice),
        a ``DataLoaderDispatcher`` skips its own batches rather than batches of the underlying
        loader, and skipping an already skipped loader adds up.
    """
    if not isinstance(dataloader, DataLoader):
        raise invalid("dataloader", dataloader, "expected a torch DataLoader", TypeError)
    check_int("num_batches", num_batches, 0)
    kwargs = loader_kwargs(dataloader)
    dataset = dataloader.dataset
    if isinstance(dataloader, DataLoaderDispatcher):
        per_batch = 1 if dataloader.split_batches else PartialState().num_processes
        sampling, still = _sampling(dataloader, num_batches * per_batch)
        return DataLoaderDispatcher(
            dataset,
            split_batches=dataloader.split_batches,
            skip_batches=dataloader.skip_batches + (num_batches if still else 0),
            _drop_last=dataloader._drop_last,
            _non_blocking=dataloader._non_blocking,
            slice_fn=dataloader.slice_fn,
            iteration=dataloader.iteration,
            **sampling,
            **kwargs,
        )
    sampling, still = _sampling(dataloader, num_batches)
    if isinstance(dataloader, SkipDataLoader):
        return SkipDataLoader(
            dataset, skip_batches=dataloader.skip_batches + still, **sampling, **kwargs
        )
    if isinstance(dataloader, DataLoaderShard):
        skipped = DataLoaderShard(
            dataset,
            device=dataloader.device,
            rng_types=dataloader.rng_types,
            synchronized_generator=dataloader.synchronized_generator,
            skip_batches=dataloader.skip_batches + still,
            _drop_last=dataloader._drop_last,
            _non_blocking=dataloader._non_blocking,
            iteration=dataloader.iteration,
            **sampling,
            **kwargs,
        )
        if routes_through_mp_device_loader(dataloader):  # on XLA: keep reading through it
            load_through_mp_device_loader(skipped, dataloader._get_iterator.device)
        return skipped
    if still:
        return SkipDataLoader(dataset, skip_batches=still, **sampling, **kwargs)
    return DataLoader(dataset, **sampling, **kwargs)
