"""prepare_data_loader: the loader one process of the job iterates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from ..state import PartialState
from ..utils.enums import DistributedType, RNGType
from ..utils.validation import (
    check_bool,
    check_int,
    check_optional_bool,
    check_optional_callable,
    invalid,
)
from .dispatch import DataLoaderDispatcher
from .iterable import IterableDatasetShard
from .loaders import (
    DataLoaderShard,
    check_device,
    check_rng_types,
    index_batches,
    loader_kwargs,
    refuse_unsupported,
)
from .samplers import BatchSamplerShard, SeedableRandomSampler
from .xla_loader import load_through_mp_device_loader


def _processes(num_processes: Any, process_index: Any) -> tuple[int, int]:
    """The job size and this process's index: as given, else from ``PartialState``."""
    if num_processes is not None:
        check_int("num_processes", num_processes, 1)
    if process_index is not None:
        check_int("process_index", process_index, 0)
    if num_processes is None or process_index is None:
        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
    if process_index >= num_processes:
        raise invalid(
            "process_index", process_index, f"expected 0 to {num_processes - 1} (num_processes)"
        )
    return num_processes, process_index


def _check_split(dataloader: DataLoader, num_processes: int) -> None:
    batches = index_batches(dataloader)
    size = getattr(batches, "batch_size", None) if batches is not None else None
    size = dataloader.batch_size if size is None else size
    if size is None:
        raise ValueError(
            "split_batches=True needs a batch size to split: dataloader.batch_size is None and "
            "its batch sampler has no batch_size; pass split_batches=False"
        )
    if size % num_processes:
        raise ValueError(
            f"split_batches=True cuts each batch of {size} samples into {num_processes} equal "
            f"pieces: the batch size must be a multiple of num_processes={num_processes}"
        )


def _seeded_generator() -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
    return generator


def _own_sampler(
    dataloader: DataLoader, sync: bool, use_seedable_sampler: bool, data_seed: int | None
) -> tuple[Any, torch.Generator | None]:
    """The index batches the new loader uses, and the generator to keep alike on every process.

    The caller's sampler and batch sampler are never changed: where the sampler needs a
    generator it lacks (or a seedable replacement), copies of the sampler and of the batch
    sampler above it are made. A generator the caller gave is shared, not copied, as in
    Accelerate: seeding it after ``prepare`` decides the order of the next epoch.
    """
    batches = index_batches(dataloader)
    sampler = getattr(batches, "sampler", None)
    if use_seedable_sampler and isinstance(sampler, RandomSampler):
        if data_seed is None and isinstance(sampler, SeedableRandomSampler):
            data_seed = sampler.initial_seed
        owned = SeedableRandomSampler(
            sampler.data_source,
            sampler.replacement,
            sampler._num_samples,
            generator=sampler.generator,
            data_seed=data_seed,
        )
        synced = None
    elif sync and hasattr(sampler, "generator") and sampler.generator is None:
        owned = copy.copy(sampler)
        owned.generator = _seeded_generator()
        synced = owned.generator
    else:
        generator = getattr(sampler, "generator", None)
        synced = generator if sync and isinstance(generator, torch.Generator) else None
        return batches, synced
    batches = copy.copy(batches)
    batches.sampler = owned
    return batches, synced


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str | RNGType] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable[..., Any] | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> DataLoader:
    """The loader that gives this process its share of ``dataloader``'s batches.

    Map-style datasets are sharded by their batch sampler (:class:`BatchSamplerShard`),
    iterable ones by :class:`IterableDatasetShard`, or, with ``dispatch_batches``, read on
    process 0 only and broadcast (:class:`DataLoaderDispatcher`). The ``drop_last`` of
    ``dataloader`` decides whether an incomplete end is dropped or completed with samples from
    the start; ``remainder`` then tells how many samples of the last global batch are real.

    Args:
        dataloader: the loader to shard; it is not modified and stays usable.
        device: where batches go with ``put_on_device`` (default: ``PartialState().device``).
        num_processes: processes sharing the data (default: from ``PartialState``).
        process_index: this process's index (default: from ``PartialState``).
        split_batches: cut each batch into one piece per process (the batch size, a multiple
            of ``num_processes``, is then the total) instead of giving each process whole
            batches (the total batch size is then ``batch_size * num_processes``).
        put_on_device: move batches to ``device``.
        rng_types: random generators to synchronise from process 0 at each iteration:
            "torch", "cuda", ... and "generator" (the sampler's), as the Accelerator does by
            default with ``["generator"]``. Without it, shuffles match across processes only if
            every process was seeded alike.
        dispatch_batches: read on process 0 and broadcast (default: True for iterable datasets
            when ``put_on_device``, else False). Needs ``put_on_device=True``; refused on XLA
            devices, where every replica reads its own shard.
        even_batches: complete the end so that every process gets as many batches, all of one
            size (samples from the start are repeated); False gives uneven ends.
        slice_fn_for_dispatch: how :class:`DataLoaderDispatcher` cuts batches.
        use_seedable_sampler: replace a ``RandomSampler`` with :class:`SeedableRandomSampler`.
        data_seed: the seed of that sampler (default: ``torch.random.initial_seed()``).
        non_blocking: non-blocking device transfers (useful with ``pin_memory=True``).
        use_stateful_dataloader: build the loader on torchdata's ``StatefulDataLoader`` (needs
            ``torchdata``): its ``state_dict()`` and ``load_state_dict()`` resume mid-epoch
            at the batch after the one in use (with ``dispatch_batches`` too).
        torch_device_mesh: not supported (NotImplementedError if given).

    Returns:
        A :class:`DataLoaderShard` or :class:`DataLoaderDispatcher` (both ``DataLoader``
        subclasses), with ``total_batch_size`` and ``total_dataset_length``. On an XLA device
        with ``put_on_device``, the shard reads its batches through torch_xla's
        ``MpDeviceLoader`` (see :mod:`notebook_launcher.data.xla_loader`).

    Raises:
        TypeError: an argument of the wrong type, named in the message.
        ValueError: an impossible combination (``split_batches`` with a batch size that is
            not a multiple of ``num_processes``, ``dispatch_batches`` without
            ``put_on_device`` or with a process split other than the job's ...).

    Example:
        >>> loader = prepare_data_loader(DataLoader(dataset, batch_size=4, shuffle=True),
        ...                              rng_types=["generator"])

    Note:
        Unlike Accelerate, the caller's loader, samplers and ``rng_types`` list are never
        modified (a generator the caller gave is shared with the new loader, as in
        Accelerate, so drawing from one advances the other); ``put_on_device`` without ``device`` uses the process's device;
        ``split_batches=True`` with a batch size of 1 on several processes is refused instead
        of losing the data; iterable datasets may have ``batch_size=None``; and on XLA
        devices the loader is not wrapped: the prepared loader itself reads through
        ``MpDeviceLoader``, keeps its tuples and named tuples, and raises a dataset's error
        (where torch_xla's reading thread would end the epoch silently).
    """
    if not isinstance(dataloader, DataLoader):
        raise invalid("dataloader", dataloader, "expected a torch DataLoader", TypeError)
    device = check_device("device", device)
    for name, flag in (
        ("split_batches", split_batches),
        ("put_on_device", put_on_device),
        ("even_batches", even_batches),
        ("use_seedable_sampler", use_seedable_sampler),
        ("non_blocking", non_blocking),
    ):
        check_bool(name, flag)
    check_optional_bool("dispatch_batches", dispatch_batches)
    rng = check_rng_types(rng_types)
    check_optional_callable("slice_fn_for_dispatch", slice_fn_for_dispatch)
    if data_seed is not None:
        check_int("data_seed", data_seed)
    stateful = check_bool("use_stateful_dataloader", use_stateful_dataloader)
    refuse_unsupported(torch_device_mesh)
    n, p = _processes(num_processes, process_index)
    iterable = isinstance(dataloader.dataset, IterableDataset)
    xla = put_on_device and _on_xla(device)
    if xla and dispatch_batches:
        raise invalid(
            "dispatch_batches",
            dispatch_batches,
            "on XLA devices every replica reads its own shard (nothing is broadcast from "
            "replica 0); leave it None or pass False",
        )
    if dispatch_batches is None:
        dispatch_batches = put_on_device and iterable and not xla
    if dispatch_batches:
        _check_dispatch(put_on_device, n, p)
    if put_on_device and device is None:
        device = PartialState().device
    if split_batches:
        _check_split(dataloader, n)
    if not iterable and index_batches(dataloader) is None and n > 1 and not dispatch_batches:
        raise invalid(
            "dataloader",
            dataloader,
            "a map-style loader with batch_size=None and no batch sampler cannot be sharded; "
            "give it a batch_size or a batch_sampler",
        )
    kwargs = loader_kwargs(dataloader)
    shard = n > 1 and not dispatch_batches
    if iterable:
        batches, synced = None, None
        generator = getattr(dataloader.dataset, "generator", None)
        if shard and isinstance(generator, torch.Generator):
            synced = generator
    else:
        batches, synced = _own_sampler(dataloader, shard, use_seedable_sampler, data_seed)
    if rng is not None and synced is None and not use_seedable_sampler:
        rng = [kind for kind in rng if RNGType(kind) is not RNGType.GENERATOR]
    if dispatch_batches:
        kwargs.pop("generator", None)
        return DataLoaderDispatcher(
            dataloader.dataset,
            split_batches=split_batches,
            _drop_last=dataloader.drop_last,
            _non_blocking=non_blocking,
            slice_fn=slice_fn_for_dispatch,
            use_stateful_dataloader=stateful,
            **_sampling(dataloader, batches, dataloader.batch_size),
            **kwargs,
        )
    dataset = dataloader.dataset
    if iterable and shard:
        size = dataloader.batch_size
        dataset = IterableDatasetShard(
            dataset,
            batch_size=size or 1,
            drop_last=dataloader.drop_last,
            num_processes=n,
            process_index=p,
            split_batches=split_batches,
        )
        batch_size = size // n if split_batches else size
    else:
        batch_size = dataloader.batch_size
        if shard:
            batches = BatchSamplerShard(batches, n, p, split_batches, even_batches)
    loader = DataLoaderShard(
        dataset,
        use_stateful_dataloader=stateful,
        device=device if put_on_device else None,
        rng_types=rng,
        synchronized_generator=synced,
        _drop_last=dataloader.drop_last,
        _non_blocking=non_blocking,
        **_sampling(dataloader, batches, batch_size),
        **kwargs,
    )
    return load_through_mp_device_loader(loader, device) if xla else loader


def _on_xla(device: torch.device | None) -> bool:
    """Whether this process is a replica of an XLA job (asked only with ``put_on_device``)."""
    if device is not None and device.type != "xla" and PartialState.current() is None:
        return False  # no state was created and the device is not an XLA one
    return PartialState().distributed_type is DistributedType.XLA


def _check_dispatch(put_on_device: bool, n: int, p: int) -> None:
    if not put_on_device:
        raise ValueError(
            "dispatch_batches=True needs put_on_device=True: process 0 broadcasts the batches "
            "from the device"
        )
    state = PartialState()
    if (n, p) != (state.num_processes, state.process_index):
        raise ValueError(
            f"dispatch_batches=True follows the job's processes ({state.num_processes} "
            f"processes, this is {state.process_index}), not num_processes={n}, "
            f"process_index={p}: leave both None"
        )


def _sampling(dataloader: DataLoader, batches: Any, batch_size: int | None) -> dict[str, Any]:
    """The sampling arguments of the new loader."""
    if isinstance(dataloader.dataset, IterableDataset):
        return {"batch_size": batch_size, "drop_last": dataloader.drop_last}
    if batches is None:  # no automatic batching: every sample is a batch
        return {"sampler": dataloader.sampler, "batch_size": None}
    if isinstance(dataloader.sampler, BatchSampler):
        return {"sampler": batches, "batch_size": dataloader.batch_size}
    return {"batch_sampler": batches}
