"""How a return value travels from a worker to the kernel.

Its pickle goes over the event pipe, but the bulk of it does not: the bytes of every large tensor
storage and of every large out-of-band pickle buffer (NumPy arrays) are written once into a
shared-memory file, and the kernel maps that file as the memory of the tensor or array it hands
back. The kernel never holds a second copy: no pickled bytes of the data, no copy out of them.

The files are named after the kernel (see :mod:`.shared_files`), so the kernel removes those it never
received when the launch ends, and the kernel's janitor (see :mod:`..launch.janitor`) those of a
kernel that was killed. The kernel maps each one privately (copy-on-write, so the value behaves as
its own memory, in later forks too) and unlinks it at once; the memory is released when the last
tensor or array using it is freed.
"""

from __future__ import annotations

import io
import mmap
import pickle
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from . import shared_files
from .by_value import CellPickler, faster_function_pickling

MIN_SHARED_BYTES = 1 << 20  # smaller pieces travel inside the pickle
_STORAGE = "storage"  # the kind of persistent id a shared storage is pickled as


class _Writer:
    """Writes the large pieces of one value into shared-memory files of the kernel ``owner_pid``."""

    def __init__(self, owner_pid: int | None) -> None:
        self.owner_pid = owner_pid
        self.files: list[tuple[str, int]] = []  # (path, bytes) in the order they were written
        self.buffers: list[int] = []  # file index of each out-of-band buffer, in pickle order
        self._storages: dict[tuple[int, int], int] = {}  # (address, bytes) -> file index

    def storage_id(self, obj: Any) -> tuple | None:
        """The persistent id of a large CPU storage (written to a file), else None."""
        if isinstance(obj, torch.storage.TypedStorage):
            untyped, dtype = obj._untyped_storage, obj.dtype
        elif isinstance(obj, torch.UntypedStorage):
            untyped, dtype = obj, None
        else:
            return None
        size = untyped.nbytes()
        if untyped.device.type != "cpu" or size < MIN_SHARED_BYTES:
            return None
        key = (untyped.data_ptr(), size)
        if key not in self._storages:
            path = self._new_file(size)
            if path is None:
                return None
            _write(path, torch.empty(0, dtype=torch.uint8).set_(untyped).numpy())
            self._storages[key] = len(self.files) - 1
        return (_STORAGE, self._storages[key], dtype)

    def keep_in_band(self, buffer: pickle.PickleBuffer) -> bool:
        """``buffer_callback``: a large buffer goes to a file (False), a small one in the pickle."""
        with buffer.raw() as view:
            if view.nbytes < MIN_SHARED_BYTES:
                return True
            path = self._new_file(view.nbytes)
            if path is None:
                return True
            _write(path, view)
        self.buffers.append(len(self.files) - 1)
        return False

    def _new_file(self, size: int) -> str | None:
        """A new file of ``size`` bytes, or None when shared memory cannot hold it or no kernel
        was named (the piece then travels in the pickle)."""
        if self.owner_pid is None:
            return None
        path = shared_files.create_file(self.owner_pid, "result-" + secrets.token_hex(8), size)
        if path is None:
            return None
        self.files.append((path, size))
        return path

    def discard(self) -> None:
        for path, _ in self.files:
            shared_files.remove(path)
        self.files.clear()
        self.buffers.clear()
        self._storages.clear()


def _write(path: str, data: Any) -> None:
    """Write the bytes of ``data`` (a buffer) into the file ``path``: written, not copied
    through a mapping, so they never count as this process's memory."""
    with memoryview(data).cast("B") as view, open(path, "r+b", buffering=0) as file:
        done = 0
        while done < len(view):
            done += file.write(view[done:])


_IS_STORAGE: dict[type, bool] = {}


def _pickler(base: type) -> type:
    class SharingPickler(base):
        def __init__(self, file: Any, writer: _Writer) -> None:
            super().__init__(
                file, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=writer.keep_in_band
            )
            self._writer = writer

        def persistent_id(self, obj: Any) -> tuple | None:
            kind = type(obj)
            storage = _IS_STORAGE.get(kind)
            if storage is None:  # each type looked at once: most objects are no storage
                storage = _IS_STORAGE[kind] = issubclass(
                    kind, (torch.storage.TypedStorage, torch.UntypedStorage)
                )
            return self._writer.storage_id(obj) if storage else None

    return SharingPickler


# Plain pickle first: a class defined in the kernel's __main__ then comes back as the kernel's own
# class under fork (isinstance and except work). What plain pickle refuses (lambdas, local classes,
# classes cloudpickle rebuilt under spawn) goes by value with cloudpickle.
_PICKLERS = (_pickler(pickle.Pickler), _pickler(CellPickler))


@dataclass(frozen=True)
class _Envelope:
    data: bytes
    files: tuple[tuple[str, int], ...]
    buffers: tuple[int, ...]


def dumps(value: Any, owner_pid: int | None = None) -> bytes:
    """``value`` pickled for the kernel: by reference where the kernel can look it up, else by
    value; its large pieces in shared memory of the kernel ``owner_pid`` (if given)."""
    return pickle.dumps(_envelope(value, owner_pid, _PICKLERS), protocol=pickle.HIGHEST_PROTOCOL)


def share(value: Any, owner_pid: int | None) -> tuple[bytes, tuple[str, ...]]:
    """``value`` pickled by value (cloudpickle) for any number of readers, its large pieces in
    shared memory of the kernel ``owner_pid`` (None: all in the pickle), written once; with the
    paths of those files, which the caller removes once every reader has received the value
    (``receive(..., unlink=False)``)."""
    with faster_function_pickling():
        envelope = _envelope(value, owner_pid, _PICKLERS[-1:])
    paths = tuple(path for path, _ in envelope.files)
    return pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL), paths


def _envelope(value: Any, owner_pid: int | None, picklers: tuple[type, ...]) -> _Envelope:
    writer = _Writer(owner_pid)
    for pickler in picklers:
        file = io.BytesIO()
        try:
            pickler(file, writer).dump(value)
        except Exception:
            writer.discard()
            if pickler is picklers[-1]:
                raise
            continue
        except BaseException:  # an interrupt: no file may stay behind
            writer.discard()
            raise
        return _Envelope(file.getvalue(), tuple(writer.files), tuple(writer.buffers))
    raise AssertionError("unreachable")


@dataclass
class Received:
    """A value's pickle with its files already mapped (and unlinked); :meth:`load` rebuilds it."""

    data: bytes
    maps: list[Any] = field(default_factory=list)  # UntypedStorage or mmap, one per file
    buffers: tuple[int, ...] = ()

    def load(self) -> Any:
        unpickler = _SharingUnpickler(io.BytesIO(self.data), self)
        return unpickler.load()


class _SharingUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, received: Received) -> None:
        buffers = [memoryview(received.maps[i]) for i in received.buffers]
        super().__init__(file, buffers=buffers)
        self._received = received

    def persistent_load(self, pid: Any) -> Any:
        kind, index, dtype = pid
        if kind != _STORAGE:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        untyped = self._received.maps[index]
        if dtype is None:
            return untyped
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def receive(payload: bytes, unlink: bool = True) -> Received:
    """Map (and, with ``unlink``, remove) every file of a worker's result; cheap, so the kernel
    does it at once. A value :func:`share` made for several readers is received with
    ``unlink=False``: its maker removes the files."""
    envelope = pickle.loads(payload)
    received = Received(envelope.data, buffers=envelope.buffers)
    as_buffer = set(envelope.buffers)
    try:
        for index, (path, size) in enumerate(envelope.files):
            # Private (copy-on-write) mappings: the value behaves as the kernel's own memory, so
            # a worker forked later that writes into it changes its copy only.
            with open(path, "rb") as file:  # FileNotFoundError rather than a new empty file
                if index in as_buffer:
                    received.maps.append(mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY))
                else:
                    received.maps.append(torch.UntypedStorage.from_file(path, False, size))
    finally:
        if unlink:
            for path, _ in envelope.files:
                shared_files.remove(path)
    return received
