"""DataLoaderShard: a DataLoader over one process's shard that keeps GradientState informed."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from ..ops import synchronize_rng_states
from ..state.gradient import GradientState
from ..utils.enums import RNGType
from ..utils.validation import check_bool, check_int, invalid
from ._batches import send_to_device
from .iterable import IterableDatasetShard
from .loader_collectives import broadcast_object, is_distributed
from .samplers import BatchSamplerShard, SeedableRandomSampler

# What DataLoader.__init__ takes, with its defaults, in the installed torch.
DATALOADER_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(DataLoader.__init__).parameters.items()
    if name not in ("self", "dataset")
}
_END = object()  # marks an exhausted iterator
# Settled by the (new) batch sampler, so never copied from the original loader.
_SAMPLING_KWARGS = ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


def loader_kwargs(dataloader: DataLoader) -> dict[str, Any]:
    """The settings of ``dataloader`` other than sampling, to build a new loader with."""
    return {
        name: getattr(dataloader, name, default)
        for name, default in DATALOADER_DEFAULTS.items()
        if name not in _SAMPLING_KWARGS
    }


def index_batches(dataloader: DataLoader) -> Any:
    """What yields the index batches: a BatchSampler given as ``sampler``, else ``batch_sampler``."""
    if not isinstance(dataloader, DataLoader):
        raise invalid("dataloader", dataloader, "expected a torch DataLoader", TypeError)
    if isinstance(dataloader.sampler, BatchSampler):
        return dataloader.sampler
    return dataloader.batch_sampler


def get_sampler(dataloader: DataLoader) -> Any:
    """The sampler of ``dataloader`` under its batch sampler (None where there is none)."""
    return getattr(index_batches(dataloader), "sampler", None)


def find_shard(batch_sampler: Any) -> BatchSamplerShard | None:
    """The BatchSamplerShard in a chain of wrapping batch samplers (None if there is none)."""
    seen = 0
    while batch_sampler is not None and seen < 32:
        if isinstance(batch_sampler, BatchSamplerShard):
            return batch_sampler
        batch_sampler, seen = getattr(batch_sampler, "batch_sampler", None), seen + 1
    return None


def _epoch_targets(dataloader: DataLoader) -> list[Any]:
    """Every sampler in the chain under ``dataloader`` that has ``set_epoch``, outermost first."""
    found: list[Any] = []
    todo = [index_batches(dataloader)]
    while todo and len(found) < 32:
        node = todo.pop(0)
        if node is None or any(node is f for f in found):
            continue
        found.append(node)
        todo += [getattr(node, "batch_sampler", None), getattr(node, "sampler", None)]
    return [node for node in found if callable(getattr(node, "set_epoch", None))]


def check_rng_types(rng_types: Any) -> list[str | RNGType] | None:
    """``rng_types`` checked, as a new list of the same items (None stays None)."""
    if rng_types is None:
        return None
    allowed = "expected None or a list of " + ", ".join(repr(v) for v in RNGType.list())
    if isinstance(rng_types, (str, bytes)) or not isinstance(rng_types, (list, tuple)):
        raise invalid("rng_types", rng_types, allowed, TypeError)
    if not all(isinstance(kind, (str, RNGType)) for kind in rng_types):
        raise invalid("rng_types", rng_types, allowed, TypeError)
    if not all(kind in RNGType for kind in rng_types):
        raise invalid("rng_types", rng_types, allowed)
    return list(rng_types)


def check_device(name: str, device: Any) -> torch.device | None:
    if device is None:
        return None
    try:
        return torch.device(device)
    except (TypeError, RuntimeError):
        raise invalid(name, device, "expected a torch.device, a device name or None", TypeError)


def refuse_unsupported(torch_device_mesh: Any) -> None:
    """Raise for the option this package does not implement: a device mesh."""
    if torch_device_mesh is not None:
        raise NotImplementedError(
            "torch_device_mesh: tensor/context parallelism is out of scope of notebook_launcher, "
            "which runs data-parallel jobs; leave it None"
        )


class DataLoaderStateMixin:
    """Where a data loader is in its epoch, as :class:`GradientState` reads it.

    Attributes:
        end_of_dataloader: True while the last batch of the epoch is being used.
        remainder: how many samples of the last global batch (the last batches of all
            processes, in process order) are real; the rest is padding. It is
            ``total_dataset_length % total_batch_size`` (0: the data divides evenly, nothing
            to drop), or -1 where unknown and with ``drop_last`` (nothing is padded).

    The class using it provides ``_drop_last``, ``total_dataset_length`` and
    ``total_batch_size``.
    """

    end_of_dataloader: bool = False
    remainder: int = -1
    _drop_last: bool = False

    @property
    def gradient_state(self) -> GradientState:
        """The process's GradientState (looked up, never stored, so loaders pickle)."""
        return GradientState()

    def reset(self) -> None:
        """Forget the end-of-epoch flags."""
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        """Start an epoch: reset the flags, work out the remainder, register as active loader."""
        self.reset()
        if not self._drop_last:
            try:
                self.remainder = self.total_dataset_length % self.total_batch_size
            except (TypeError, AttributeError, ZeroDivisionError, NotImplementedError):
                pass
        self.gradient_state.add_dataloader(self)

    def end(self) -> None:
        """Finish an epoch (or leave it early): the loader is no longer the active one."""
        self.gradient_state.remove_dataloader(self)


class PreparedLoaderMixin(DataLoaderStateMixin):
    """Epoch and sampler access shared by the prepared loaders (on top of the state flags).

    As in Accelerate, ``DataLoaderShard(..., use_stateful_dataloader=True)`` (and the same for
    ``DataLoaderDispatcher``) is a loader built on torchdata's ``StatefulDataLoader``: an
    object of that class's flavour registered in :data:`STATEFUL_FLAVOURS`.
    """

    use_stateful_dataloader = False  # True in the StatefulDataLoader flavours

    def __new__(cls, *args: Any, use_stateful_dataloader: bool = False, **kwargs: Any) -> Any:
        if use_stateful_dataloader is True and cls in STATEFUL_FLAVOURS:
            cls = STATEFUL_FLAVOURS[cls]()
        return super().__new__(cls)

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` from now on, in the samplers and dataset that have ``set_epoch`` too."""
        self.iteration = check_int("epoch", epoch, 0)
        for target in _epoch_targets(self):
            target.set_epoch(epoch)
        if callable(getattr(self.dataset, "set_epoch", None)):
            self.dataset.set_epoch(epoch)

    def get_sampler(self) -> Any:
        """The sampler under the batch sampler."""
        return get_sampler(self)

    def set_sampler(self, sampler: Any) -> None:
        """Replace the sampler under the (innermost) batch sampler."""
        set_sampler(self, sampler)


class DataLoaderShard(PreparedLoaderMixin, DataLoader):
    """A ``DataLoader`` that places batches on a device and tells GradientState where it is.

    Iterating it synchronises the random generators named in ``rng_types`` from process 0
    first, sets the epoch on the samplers and the dataset, then reads one batch ahead so that
    ``end_of_dataloader`` is True while the last batch is used. Leaving the loop early
    (``break``) unregisters the loader at once.

    Args:
        dataset: the dataset (a shard of it, or one read through a sharding batch sampler).
        device: where to put the batches (None: leave them where they are).
        rng_types: random generators to synchronise at the start of each iteration
            (``RNGType`` values: "torch", "cuda", "generator" ...).
        synchronized_generator: the generator "generator" refers to.
        skip_batches: batches to skip at the start of each iteration.
        use_stateful_dataloader: build the loader on torchdata's ``StatefulDataLoader``, whose
            ``state_dict()``/``load_state_dict()`` resume mid-epoch (the object is then of its
            subclass ``StatefulDataLoaderShard``; see :mod:`notebook_launcher.data.stateful`).
        _drop_last: whether the original loader dropped its last batch (for ``remainder``).
        _non_blocking: non-blocking device transfers.
        torch_device_mesh: not supported (NotImplementedError if given).
        iteration: the epoch the next iteration uses.
        **kwargs: ``DataLoader`` arguments.

    Attributes:
        total_batch_size: samples per step over all processes.
        total_dataset_length: samples of the whole dataset.

    Note:
        Unlike Accelerate, this is a ``DataLoader`` subclass (not a proxy), ``len()`` counts
        the skipped batches out, a ``break`` out of the loop unregisters the loader at once
        (GradientState then reads no end of loader and no remainder), and with ``"generator"`` in ``rng_types`` the seed of a
        :class:`SeedableRandomSampler` is taken from process 0.
    """

    def __init__(
        self,
        dataset: Any,
        device: torch.device | str | None = None,
        rng_types: list[str | RNGType] | None = None,
        synchronized_generator: torch.Generator | None = None,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        torch_device_mesh: Any = None,
        iteration: int = 0,
        **kwargs: Any,
    ) -> None:
        check_bool("use_stateful_dataloader", use_stateful_dataloader)
        refuse_unsupported(torch_device_mesh)
        if synchronized_generator is not None and not isinstance(
            synchronized_generator, torch.Generator
        ):
            raise invalid(
                "synchronized_generator",
                synchronized_generator,
                "expected a torch.Generator or None",
                TypeError,
            )
        super().__init__(dataset, **kwargs)
        self.device = check_device("device", device)
        self.rng_types = check_rng_types(rng_types)
        self.synchronized_generator = synchronized_generator
        self.skip_batches = check_int("skip_batches", skip_batches, 0)
        self._drop_last = check_bool("_drop_last", _drop_last)
        self._non_blocking = check_bool("_non_blocking", _non_blocking)
        self.iteration = check_int("iteration", iteration, 0)

    def _source(self) -> Iterator[Any]:
        """The batches of an epoch, from the loader class underneath."""
        return super().__iter__()

    def __iter__(self) -> Iterator[Any]:
        self._synchronize()
        self.begin()
        try:
            self.set_epoch(self.iteration)
            source = self._source()
            # Skipped batches are read (a shard of an iterable dataset cannot jump) but not moved.
            current = next(source, _END)
            for _ in range(self.skip_batches):
                current = next(source, _END) if current is not _END else _END
            if current is _END:
                self.iteration += 1
                return
            device, non_blocking = self.device, self._non_blocking
            if device is None:
                for upcoming in source:
                    yield current
                    current = upcoming
            else:
                current = send_to_device(current, device, non_blocking)
                for upcoming in source:
                    yield current
                    current = send_to_device(upcoming, device, non_blocking)
            self.end_of_dataloader = True
            yield current
            self.iteration += 1
        finally:
            self.end()

    def _synchronize(self) -> None:
        """Give this process the random states of process 0 (nothing to do in one process)."""
        if not self.rng_types or not is_distributed():
            return
        generator = self.synchronized_generator
        kinds = [
            k
            for k in self.rng_types
            if RNGType(k) is not RNGType.GENERATOR or generator is not None
        ]
        if kinds:
            synchronize_rng_states(kinds, generator)
        sampler = self.get_sampler()
        generators = any(RNGType(k) is RNGType.GENERATOR for k in self.rng_types)
        if generators and isinstance(sampler, SeedableRandomSampler):
            sampler.initial_seed = broadcast_object(sampler.initial_seed)

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip_batches)

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all processes (None where batches have no fixed size)."""
        if isinstance(self.dataset, IterableDatasetShard):
            return self.dataset.global_batch_size if self.batch_size is not None else None
        batches = index_batches(self)
        shard = find_shard(batches)
        if shard is not None:
            if shard.batch_size is None:
                return None
            return shard.batch_size * (1 if shard.split_batches else shard.num_processes)
        return getattr(batches, "batch_size", None)

    @property
    def total_dataset_length(self) -> int:
        """Samples in the whole dataset (over all processes)."""
        if isinstance(self.dataset, IterableDatasetShard):
            return len(self.dataset.dataset)
        if hasattr(self.dataset, "total_length"):
            return self.dataset.total_length
        return len(self.dataset)


# The factories of the StatefulDataLoader flavours of the prepared loader classes, by class: set
# by ``data.stateful``, so that this module need not import that one (nor torchdata).
STATEFUL_FLAVOURS: dict[type, Any] = {}


def set_sampler(dataloader: DataLoader, sampler: Any) -> None:
    """Replace the sampler under the innermost batch sampler of ``dataloader``."""
    batches = index_batches(dataloader)
    while getattr(batches, "batch_sampler", None) is not None:
        batches = batches.batch_sampler
    if batches is None or not hasattr(batches, "sampler"):
        raise invalid("sampler", sampler, "this loader's batch sampler has no sampler", TypeError)
    batches.sampler = sampler
