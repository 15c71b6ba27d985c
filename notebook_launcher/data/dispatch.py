"""DataLoaderDispatcher: process 0 reads the batches and hands every process its part."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

from ..state.partial import PartialState
from ..utils.validation import check_bool, check_int, check_optional_callable
from ._batches import concatenate, find_batch_size, send_to_device, slice_tensors
from .loader_collectives import broadcast_batch
from .loaders import PreparedLoaderMixin, refuse_unsupported

try:  # DataPipes share a seed across processes when their iterator is created.
    from torch.utils.data import IterDataPipe as _IterDataPipe
except ImportError:  # pragma: no cover - removed from recent torch
    _IterDataPipe = None


class DataLoaderDispatcher(PreparedLoaderMixin, DataLoader):
    """A ``DataLoader`` read on process 0 only, whose batches are broadcast and cut up.

    Each step, process 0 takes one batch (``split_batches=True``) or ``num_processes``
    batches joined into one (``split_batches=False``), puts it on its device and broadcasts it;
    every process keeps its own contiguous piece. The last global batch, if it cannot be cut
    into equal pieces, is completed with samples from the start of the first one, and
    ``remainder`` then says how many of its samples are real.

    Args:
        dataset: the whole dataset.
        split_batches: cut each batch of the loader into pieces (the observed batch size stays
            that of the loader) instead of giving each process whole batches.
        skip_batches: batches to skip at the start of each iteration.
        use_stateful_dataloader: build the loader on torchdata's ``StatefulDataLoader``, whose
            ``state_dict()``/``load_state_dict()`` resume mid-epoch (the object is then of its
            subclass ``StatefulDataLoaderDispatcher``; see :mod:`notebook_launcher.data.stateful`).
        _drop_last: whether the loader drops its last batch.
        _non_blocking: non-blocking device transfers.
        slice_fn: ``slice_fn(batch, slice, process_index=, num_processes=)`` cutting a batch
            (default: tensors and per-sample lists along the first dimension).
        torch_device_mesh: not supported (NotImplementedError if given).
        iteration: the epoch the next iteration uses.
        **kwargs: ``DataLoader`` arguments.

    Note:
        Unlike Accelerate, a loader with ``drop_last=True`` and fewer full batches than
        processes yields nothing instead of raising TypeError; other processes than process 0
        do not start the loader's workers; a middle batch that cannot be cut into equal pieces
        raises a ValueError instead of losing samples; and batches may hold non-tensor values
        (per-sample lists are cut, other values are sent whole).
    """

    def __init__(
        self,
        dataset: Any,
        split_batches: bool = False,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        slice_fn: Callable[..., Any] | None = None,
        torch_device_mesh: Any = None,
        iteration: int = 0,
        **kwargs: Any,
    ) -> None:
        check_bool("use_stateful_dataloader", use_stateful_dataloader)
        refuse_unsupported(torch_device_mesh)
        super().__init__(dataset, **kwargs)
        self.split_batches = check_bool("split_batches", split_batches)
        self.skip_batches = check_int("skip_batches", skip_batches, 0)
        self._drop_last = check_bool("_drop_last", _drop_last)
        self._non_blocking = check_bool("_non_blocking", _non_blocking)
        self.slice_fn = check_optional_callable("slice_fn", slice_fn) or slice_tensors
        self.iteration = check_int("iteration", iteration, 0)

    @property
    def state(self) -> PartialState:
        """The process's PartialState."""
        return PartialState()

    def __iter__(self) -> Iterator[Any]:
        state = PartialState()
        self.begin()
        try:
            self.set_epoch(self.iteration)
            source = self._source() if self._reads(state) else iter(())
            yield from self._pieces(source, state)
            self.iteration += 1
        finally:
            self.end()

    def _reads(self, state: PartialState) -> bool:
        """Whether this process iterates the loader underneath (process 0, and every process
        for a DataPipe, whose iterator shares a seed across processes when it is created)."""
        return state.process_index == 0 or (
            _IterDataPipe is not None and isinstance(self.dataset, _IterDataPipe)
        )

    def _source(self) -> Iterator[Any]:
        """The batches of an epoch, from the loader class underneath."""
        return super().__iter__()

    def _first_pad(self) -> Any:
        """What completes the epoch's last batch before its first batch is read (None: the
        first samples of that batch)."""
        return None

    def _pieces(self, source: Iterator[Any], state: PartialState) -> Iterator[Any]:
        n, rank = state.num_processes, state.process_index
        self._pad = self._first_pad()
        current = self._fetch(source, state)
        index = 0
        while current is not None:
            upcoming = self._fetch(source, state)
            size = find_batch_size(current)
            if size is None:
                raise ValueError(
                    "dispatch_batches needs batches holding at least one tensor with a first "
                    f"(batch) dimension, got {type(current).__name__}: pass dispatch_batches=False"
                )
            if self._pad is None and not self._drop_last:
                self._pad = slice_tensors(current, slice(0, n))
            if upcoming is None:
                self.end_of_dataloader = True
                if not self._drop_last:
                    self.remainder = size
            if size % n:
                if upcoming is not None or self._pad is None:
                    raise ValueError(
                        f"a batch of {size} samples cannot be cut into {n} equal pieces: batches "
                        "before the last must have a size that is a multiple of the processes; "
                        "pass dispatch_batches=False"
                    )
                current = self._complete(current, self._pad, n - size % n)
                size += n - size % n
            per = size // n
            piece = self.slice_fn(
                current, slice(rank * per, (rank + 1) * per), process_index=rank, num_processes=n
            )
            if index >= self.skip_batches:
                yield piece
            index += 1
            current = upcoming

    def _complete(self, batch: Any, pad: Any, missing: int) -> Any:
        """``batch`` followed by ``missing`` samples taken from ``pad`` (repeated as needed)."""
        available = find_batch_size(pad) or 0
        repeats = [pad] * -(-missing // max(available, 1))
        filler = slice_tensors(concatenate(repeats), slice(0, missing))
        return concatenate([batch, filler])

    def _fetch(self, source: Iterator[Any], state: PartialState) -> Any:
        """The next global batch on every process, or None at the end."""
        batch = None
        if state.process_index == 0:
            wanted = 1 if self.split_batches else state.num_processes
            group = list(itertools.islice(source, wanted))
            if group and (len(group) == wanted or not self._drop_last):
                try:
                    batch = concatenate(group)
                except RuntimeError as error:
                    raise RuntimeError(
                        "batches of different shapes cannot be joined for dispatch_batches=True: "
                        "pass split_batches=True (process 0 cuts one batch) or "
                        "dispatch_batches=False (each process reads its own batches)"
                    ) from error
                batch = send_to_device(batch, state.device, self._non_blocking)
        if state.num_processes == 1:
            return batch
        return broadcast_batch(batch, state.device)

    def __len__(self) -> int:
        whole = super().__len__()
        n = PartialState().num_processes
        if self.split_batches:
            length = whole
        elif self._drop_last:
            length = whole // n
        else:
            length = -(-whole // n)
        return max(0, length - self.skip_batches)

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all processes."""
        size = self.batch_size
        if size is None:
            size = getattr(self.batch_sampler, "batch_size", None)
        if size is None:
            return None
        return size if self.split_batches else size * PartialState().num_processes

    @property
    def total_dataset_length(self) -> int:
        """Samples in the whole dataset."""
        return len(self.dataset)
