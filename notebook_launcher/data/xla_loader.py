"""Prepared loaders on XLA devices: their batches arrive through torch_xla's ``MpDeviceLoader``.

On an XLA device :func:`~notebook_launcher.data.prepare_data_loader` still returns its
:class:`~notebook_launcher.data.DataLoaderShard`, so the loader keeps everything it has
elsewhere: ``len()``, ``batch_size``, ``total_batch_size``, ``total_dataset_length``,
``set_epoch``, ``end_of_dataloader`` and ``remainder`` as :class:`GradientState` reads them (hence
``gather_for_metrics``) and ``skip_first_batches``.
Only where the batches of an epoch come from changes. ``DataLoader.__iter__`` asks
``self._get_iterator()`` for that iterator; :func:`load_through_mp_device_loader` gives the loader
its own ``_get_iterator``, an :class:`MpDeviceRoute`. Each epoch then runs:

- in the replica's thread: after the loader has synchronised the random generators named in
  ``rng_types`` from replica 0 (as it does on any device), torch's iterator over the host
  batches is created and its first batch read, so the draws an epoch's start makes from
  torch's global generator happen where they do elsewhere;
- in ``MpDeviceLoader``'s threads: the next host batches are read ahead and copied to the device;
- in the replica's thread again: each batch gets its own structure back (torch_xla turns tuples
  and named tuples into lists) and the loader's bookkeeping (the last batch flagged one batch
  ahead, skipped batches, its registration with GradientState) runs as on any device, in the
  replica's own state (replicas may be threads of one process).

An exception raised while reading a batch in the background is raised in the replica's thread
where that batch would have come (torch_xla's reading thread would otherwise end the epoch
early, silently). Leaving an epoch before its end stops ``MpDeviceLoader``'s threads.

Note:
    With ``num_workers=0`` the dataset's ``__getitem__`` runs in ``MpDeviceLoader``'s reading
    thread, at the same time as the training step: random augmentations drawing from torch's
    global generator then make different draws from run to run; give the dataset a generator of
    its own, or use ``num_workers > 0``.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..utils.tree import map_structure
from ..utils.validation import invalid
from ._batches import TensorSpec, describe, tensors_of
from .loaders import check_device

_END = object()


def _is_spec(value: Any) -> bool:
    return isinstance(value, TensorSpec)


class _HostBatches:
    """What ``MpDeviceLoader`` reads, in its own thread: one epoch of host batches.

    Each batch travels as ``[number, *tensors]``; its structure (tensors replaced by their
    :class:`TensorSpec`) waits in :attr:`skeletons` under that number.
    """

    def __init__(self, first: Any, rest: Any) -> None:
        self._first = first
        self._rest = rest
        self.skeletons: dict[int, Any] = {}
        self.error: Exception | None = None
        self.stopped = False
        self.done = first is _END  # every batch was read

    def __iter__(self) -> Any:
        batch, self._first = self._first, None
        number = 0
        while batch is not _END and not self.stopped:
            self.skeletons[number] = describe(batch)
            yield [number, *tensors_of(batch)]
            number += 1
            try:
                batch = next(self._rest, _END)
            except Exception as exc:  # raised again in the replica's thread, at this batch
                self.error = exc
                return
        self.done = batch is _END


class _DeviceBatches:
    """The iterator of one epoch's device batches: what the loader's ``_get_iterator`` returns.

    ``_reset`` starts the next epoch on the same object, as ``DataLoader.__iter__`` asks of the
    iterator it keeps with ``persistent_workers``.
    """

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self._device = device
        self._host: Any = None  # torch's iterator of host batches (its workers may persist)
        self._source: _HostBatches | None = None
        self._mp: Any = None
        self._batches: Any = iter(())
        self._start(loader)

    def _start(self, loader: DataLoader) -> None:
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        reuse = self._host is not None and self._source is not None and self._source.done
        # The class's own _get_iterator (the instance's is the route that called this).
        self._host = self._host if reuse else type(loader)._get_iterator(loader)
        if reuse:
            self._host._reset(loader)
        first = next(self._host, _END)  # in this thread: see the module's docstring
        self._source = _HostBatches(first, self._host)
        self._mp = MpDeviceLoader(self._source, self._device)
        self._batches = iter(self._mp) if first is not _END else iter(())

    def _reset(self, loader: DataLoader) -> None:
        self.close()
        self._start(loader)

    def __iter__(self) -> _DeviceBatches:
        return self

    def __next__(self) -> Any:
        source = self._source
        try:
            item = next(self._batches)
        except StopIteration:
            if source is not None and source.error is not None:
                error, source.error = source.error, None
                raise error from None
            raise
        number, *tensors = item
        moved = iter(tensors)
        return map_structure(lambda _: next(moved), source.skeletons.pop(number), _is_spec)

    def close(self) -> None:
        """Stop reading ahead; the threads of an unfinished epoch are closed in the background."""
        source = self._source
        if source is None or source.stopped:
            return
        source.stopped = True
        self._batches = iter(())
        parallel = getattr(self._mp, "_parallel_loader", None)
        if not source.done and callable(getattr(parallel, "close", None)):
            # close() joins the threads, one of which may be reading a batch: not here.
            threading.Thread(
                target=parallel.close, name="MpDeviceLoader.close", daemon=True
            ).start()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class MpDeviceRoute:
    """A prepared loader's ``_get_iterator``: each epoch's batches through ``MpDeviceLoader``.

    Args:
        loader: the prepared loader.
        device: the replica's XLA device.
    """

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader = loader
        self.device = device

    def __call__(self) -> _DeviceBatches:
        return _DeviceBatches(self.loader, self.device)


def load_through_mp_device_loader(loader: DataLoader, device: Any) -> DataLoader:
    """Make ``loader``'s iterations read their batches through ``MpDeviceLoader`` to ``device``.

    Args:
        loader: a loader from :func:`~notebook_launcher.data.prepare_data_loader`.
        device: the XLA device of the calling replica.

    Returns:
        ``loader`` itself, changed in place.

    Raises:
        TypeError: ``loader`` is not a DataLoader, or ``device`` not a device.
    """
    if not isinstance(loader, DataLoader):
        raise invalid("loader", loader, "expected a torch DataLoader", TypeError)
    target = check_device("device", device)
    if target is None:
        raise invalid("device", device, "expected the replica's XLA device", TypeError)
    loader._get_iterator = MpDeviceRoute(loader, target)
    return loader


def routes_through_mp_device_loader(loader: Any) -> bool:
    """Whether ``loader``'s batches come through ``MpDeviceLoader``."""
    return isinstance(getattr(loader, "__dict__", {}).get("_get_iterator"), MpDeviceRoute)
