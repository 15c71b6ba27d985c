"""TEST DOUBLE of torch_xla.distributed.parallel_loader, with 2.9's threads and queues.

``MpDeviceLoader(loader, device, **kwargs)`` starts a ``ParallelLoader`` on each iteration (closing
the previous one): one daemon thread reads ``loader`` into a bounded host queue, transfer threads
move each item with ``xm.send_cpu_data_to_device`` (tuples come back as lists, as in torch_xla) into
a bounded device queue, and the per-device iterator calls ``torch_xla.sync()`` before each batch.
As in torch_xla, an exception raised by ``loader`` ends the reading thread (the epoch just ends),
while one raised by a transfer is raised by the iterator.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
from typing import Any

import torch

import torch_xla
import torch_xla.core.xla_model as xm


class _Queue:
    """Bounded queue that can be closed: ``get`` returns None once closed for writing and empty."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._items: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._close_read = self._close_write = False

    def max_size(self) -> int:
        return self._maxsize

    def put(self, item: Any) -> None:
        with self._lock:
            while len(self._items) >= self._maxsize and not self._close_read:
                self._space.wait()
            if not self._close_read:
                self._items.append(item)
                self._ready.notify()

    def get(self) -> Any:
        with self._lock:
            while not self._items and not self._close_write:
                self._ready.wait()
            item = self._items.popleft() if self._items else None
            if item is not None:
                self._space.notify()
            return item

    def close(self) -> None:
        with self._lock:
            self._close_read = self._close_write = True
            self._ready.notify_all()
            self._space.notify_all()

    def close_write(self) -> None:
        with self._lock:
            self._close_write = True
            self._ready.notify_all()


class PerDeviceLoader:
    def __init__(self, loader: ParallelLoader, device: torch.device) -> None:
        self._loader = loader
        self._device = device

    def __iter__(self) -> PerDeviceLoader:
        return self

    def __next__(self) -> Any:
        torch_xla.sync()
        item = self._loader.next_item(self._device)
        if item is None:
            if not self._loader._exception_queue.empty():
                raise self._loader._exception_queue.get()
            torch_xla.sync()
            raise StopIteration
        return item

    def __len__(self) -> int:
        return self._loader.per_device_samples()


class ParallelLoader:
    def __init__(
        self,
        cpu_loader: Any,
        devices: list[Any],
        batchdim: int = 0,
        batches_per_execution: int = 1,
        loader_prefetch_size: int = 16,
        device_prefetch_size: int = 8,
        host_to_device_transfer_threads: int = 1,
        input_sharding: Any = None,
    ) -> None:
        self._cpu_loader = cpu_loader
        self._devices = [torch.device(d) for d in devices]
        self._done = False
        self._exception_queue: queue.Queue[BaseException] = queue.Queue()
        self._queues = {
            d: (_Queue(loader_prefetch_size), _Queue(device_prefetch_size), itertools.count())
            for d in self._devices
        }
        self._threads = [threading.Thread(target=self._loader_worker, daemon=True)]
        for device in self._devices:
            for _ in range(host_to_device_transfer_threads):
                self._threads.append(
                    threading.Thread(
                        target=self._worker,
                        args=(device, host_to_device_transfer_threads),
                        daemon=True,
                    )
                )
        for thread in self._threads:
            thread.start()

    def per_device_loader(self, device: Any) -> PerDeviceLoader:
        return PerDeviceLoader(self, torch.device(device))

    def per_device_samples(self) -> int:
        return len(self._cpu_loader) // len(self._devices)

    def next_item(self, device: torch.device) -> Any:
        return self._queues[device][1].get()

    def close(self) -> None:
        self._done = True
        for host, on_device, _ in self._queues.values():
            on_device.close()
            host.close()
        for thread in self._threads:
            thread.join()

    def _loader_worker(self) -> None:
        queues = list(self._queues.values())
        data = iter(self._cpu_loader)
        pending: list[Any] = []
        try:
            while not self._done:
                try:
                    item = next(data)
                except StopIteration:
                    break
                pending.append(item)
                if len(pending) == len(self._devices):
                    for (host, _, _), device_item in zip(queues, pending, strict=True):
                        host.put(device_item)
                    pending = []
        finally:
            for host, _, _ in queues:
                host.close_write()

    def _worker(self, device: torch.device, threads: int) -> None:
        host, on_device, closed = self._queues[device]
        try:
            while True:
                batch = []
                while len(batch) < on_device.max_size():
                    item = host.get()
                    if item is None:
                        break
                    batch.append(item)
                if not batch:
                    break
                with torch.no_grad():
                    try:
                        batch = xm.send_cpu_data_to_device(batch, device)
                    except Exception as exc:
                        self._exception_queue.put(exc)
                        break
                for item in batch:
                    on_device.put(item)
        finally:
            if next(closed) == threads - 1:
                on_device.close_write()


class MpDeviceLoader:
    """Iterates ``loader`` through a new ``ParallelLoader`` for ``device`` on each iteration."""

    def __init__(self, loader: Any, device: Any, **kwargs: Any) -> None:
        self._loader = loader
        self._device = device
        self._parallel_loader_kwargs = kwargs
        self._parallel_loader: ParallelLoader | None = None

    def __iter__(self) -> PerDeviceLoader:
        if self._parallel_loader is not None:
            self._parallel_loader.close()
            self._parallel_loader = None
        self._parallel_loader = ParallelLoader(
            self._loader, [self._device], **self._parallel_loader_kwargs
        )
        return self._parallel_loader.per_device_loader(self._device)

    def __len__(self) -> int:
        return len(self._loader)
