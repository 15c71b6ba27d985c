"""Collectives through shared memory, for the CPU processes of one machine.

Gloo moves a CPU job's tensors over loopback TCP. Every collective is a chain of hand-offs
between each rank's thread and gloo's threads, and on a machine with one core per process each
hand-off waits for the scheduler: on 2 cores a 300 KB all-reduce that takes about 0.3 ms back to
back takes about 1 ms between training steps. When every rank runs on this machine,
:class:`SharedMemoryExchange` exchanges tensors through one shared mapping instead, for DDP's
gradients (the DDP hook in :mod:`.cpu`) and for the collectives of :mod:`notebook_launcher.ops`
(all-reduce, all-gather, broadcast):

* each rank copies its tensor (already divided, for a mean) into its own slot, writes what it
  did (operation, dtype, elements) and then publishes the step number in its own flag: one
  writer per word, so no atomic operation is needed;
* every rank waits until all flags reached the step, checks that every rank did the same (else
  it raises, naming what each rank did, where gloo would hang or mix the data up), then reads:
  an all-reduce sums the slots in rank order (the same additions in the same order on every
  rank, so the results are identical everywhere), an all-gather copies every slot, a
  broadcast the source's;
* two areas alternate, so a rank never overwrites a slot that a slower rank still reads (to
  write step ``s + 2`` every rank must have published ``s + 1``, after reading step ``s``).

Tensors larger than a slot go through in slot-sized chunks. The mapping is a file in
``/dev/shm`` that is unlinked as soon as every rank has opened it (and removed by the launcher
if a rank dies first), so nothing is left behind. Waiting spins briefly, then yields, then
sleeps, so a rank that waits for a hung peer uses almost no CPU (the launcher's stall check
still sees the hang); past ``timeout`` seconds it raises, naming the ranks that never arrived.

The exchange relies on x86's store ordering (a slot's bytes are visible before the flag written
after them), so it is used on x86-64 Linux only; elsewhere, and when
``NOTEBOOK_LAUNCHER_SHARED_MEMORY=0``, gloo carries the tensors.
"""

from __future__ import annotations

import mmap
import os
import platform
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import torch

from ..protocol.names import SHARED_MEMORY_DIRECTORY, remove, shared_memory_path
from ..utils.validation import check_int, check_number, invalid

ENV_SWITCH = "NOTEBOOK_LAUNCHER_SHARED_MEMORY"
BUDGET = 32 * 2**20  # bytes of shared memory for the two areas of all ranks together
HEADER = 4096  # flags and sizes, three int64 per rank, then the areas from this offset
MOST_RANKS = HEADER // 24
SPIN_SECONDS = 0.002  # busy-wait (with yields) this long before sleeping between checks
LONGEST_SLEEP = 0.005
DEFAULT_TIMEOUT = 1800.0


def supported() -> bool:
    """Whether this machine can use the exchange (x86-64 Linux with /dev/shm), and it is on."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    machine = platform.machine().lower()
    return (
        sys.platform == "linux"
        and machine in ("x86_64", "amd64")
        and os.path.isdir(SHARED_MEMORY_DIRECTORY)
    )


class SharedMemoryExchange:
    """All-reduce, all-gather and broadcast over the ranks of one machine, through a shared
    mapping.

    Create it with :meth:`create` on every rank (a collective over the default process group).

    Attributes:
        rank, world_size: this process's index and the number of processes.
        slot_bytes: the most bytes one rank contributes per step; larger tensors are chunked.
    """

    def __init__(
        self,
        mapping: mmap.mmap,
        rank: int,
        world_size: int,
        slot_bytes: int,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.rank, self.world_size, self.slot_bytes = rank, world_size, slot_bytes
        self.timeout = timeout
        self._mapping = mapping
        self._header = memoryview(mapping)[: 8 * 3 * world_size].cast("q")
        self._flags = self._header[:world_size]  # per rank: the last step it published
        # Per area, then per rank: the elements sent at the area's last step (two, like the
        # areas, so that a rank one step ahead does not overwrite what a slower one checks).
        self._sizes = [self._header[world_size * (1 + a) : world_size * (2 + a)] for a in (0, 1)]
        self._areas = torch.frombuffer(
            mapping, dtype=torch.uint8, count=2 * world_size * slot_bytes, offset=HEADER
        ).view(2, world_size, slot_bytes)
        self._views: dict[torch.dtype, torch.Tensor] = {}
        self._step = 0
        self._kinds: dict[tuple[str, torch.dtype], int] = {}
        # A hook the user registered on the model after ours: DDP takes one hook only, so ours
        # hands each bucket to it (see ``register_ddp_hook`` in :mod:`.cpu`).
        self.delegate: tuple[Any, Any] | None = None

    @classmethod
    def create(
        cls, state: Any, needed_bytes: int, timeout: float = DEFAULT_TIMEOUT
    ) -> SharedMemoryExchange | None:
        """The exchange for this job, or None where it cannot be used (then gloo is).

        Collective: every rank of the default process group must call it. It is None for one
        process, for ranks on several machines, on an unsupported machine, or when any rank
        could not map the file.

        Args:
            state: the job's ``PartialState``.
            needed_bytes: the largest tensor to reduce, in bytes (the slots are no larger, and
                all of them together stay within ``BUDGET``).
            timeout: seconds to wait for the other ranks at each step before raising.
        """
        import torch.distributed as dist

        check_int("needed_bytes", needed_bytes, 1)
        check_number("timeout", timeout, positive=True)
        world = state.num_processes
        on_gloo = "gloo" in str(state.backend or "")
        alone = state._local_num_processes != world  # ranks on other machines
        if world < 2 or world > MOST_RANKS or alone or not on_gloo:
            return None
        # Every rank decides alike: the environment may differ, so agree on it.
        usable = dist_all(supported())
        if not usable:
            return None
        slot = max(64, min(int(needed_bytes), BUDGET // (2 * world)) // 64 * 64)
        size = HEADER + 2 * world * slot
        names: list[Any] = [None]
        created = None
        if state.process_index == 0:
            created = _create_file(size)
            names[0] = created
        dist.broadcast_object_list(names, src=0)
        mapping = _open(names[0], size) if names[0] else None
        everyone = dist_all(mapping is not None)
        if created:  # every rank has its mapping (or gave up): nothing is left behind
            remove(created)
        if not everyone:
            if mapping is not None:
                mapping.close()
            return None
        return cls(mapping, state.process_index, world, slot, timeout)

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # A copy or pickle of the model (DDP keeps its hooks' states) carries no mapping:
        # DDP does not register a copy's hooks again, and no other process could use it.
        return _no_exchange, ()

    def all_reduce_(self, tensor: torch.Tensor, divisor: int | None = None) -> torch.Tensor:
        """Sum ``tensor`` (contiguous) over the ranks in place, each share divided by ``divisor``.

        Every rank must call it with a tensor of the same size and dtype, in the same order.
        """
        flat = _contiguous_cpu("tensor", tensor)
        if divisor is not None:
            check_int("divisor", divisor, 1)
            if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
                raise invalid("divisor", divisor, f"{tensor.dtype} cannot be divided in place")
        for chunk, area in self._chunks(flat):
            if divisor is None:
                area[self.rank].copy_(chunk)
            else:
                torch.div(chunk, divisor, out=area[self.rank])
            self._publish("all_reduce", chunk)
            torch.sum(area, dim=0, out=chunk)
        return tensor

    def all_gather_(self, output: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
        """Fill ``output`` (contiguous, ``world_size`` times ``tensor``'s elements) with every
        rank's ``tensor`` in rank order."""
        flat = _contiguous_cpu("tensor", tensor)
        rows = _contiguous_cpu("output", output).view(self.world_size, -1)
        if rows.shape[1] != flat.numel() or output.dtype != tensor.dtype:
            raise invalid(
                "output", tuple(output.shape), "expected world_size times the tensor's elements"
            )
        begin = 0
        for chunk, area in self._chunks(flat):
            area[self.rank].copy_(chunk)
            self._publish("all_gather", chunk)
            rows[:, begin : begin + chunk.numel()].copy_(area)
            begin += chunk.numel()
        return output

    def broadcast_(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """Overwrite ``tensor`` (contiguous) with rank ``src``'s, in place."""
        flat = _contiguous_cpu("tensor", tensor)
        check_int("src", src, 0)
        if src >= self.world_size:
            raise invalid("src", src, f"ranks are numbered 0 to {self.world_size - 1}")
        for chunk, area in self._chunks(flat):
            if self.rank == src:
                area[src].copy_(chunk)
            self._publish(f"broadcast from {src}", chunk)
            if self.rank != src:
                chunk.copy_(area[src])
        return tensor

    def _chunks(self, flat: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Slot-sized pieces of ``flat``, each with the area of its step ([world, elements])."""
        view = self._view(flat.dtype)
        per_slot = view.shape[-1]
        for begin in range(0, max(flat.numel(), 1), per_slot):
            chunk = flat[begin : begin + per_slot]
            self._step += 1
            yield chunk, view[self._step % 2, :, : chunk.numel()]

    def _publish(self, operation: str, chunk: torch.Tensor) -> None:
        """Say this rank's slot is written, wait for every rank, and check they all did the same
        operation on as many elements of the same dtype (else the sums would be wrong)."""
        kind = self._kinds.get((operation, chunk.dtype))
        if kind is None:
            kind = self._kinds[operation, chunk.dtype] = _kind(operation, chunk.dtype)
        code = (chunk.numel() << 20) | kind
        sizes = self._sizes[self._step % 2]
        sizes[self.rank] = code
        self._flags[self.rank] = self._step
        self._wait(self._step)
        if min(sizes) != max(sizes):
            ranks = {r: _describe(c) for r, c in enumerate(sizes.tolist())}
            raise ValueError(
                f"shared-memory collective: the ranks differ at step {self._step}: {ranks} "
                "(every rank must run the same collectives, on tensors of the same size and "
                "dtype, in the same order)"
            )

    def _view(self, dtype: torch.dtype) -> torch.Tensor:
        """The areas as ``dtype`` elements: [2, world, elements per slot] (slots are 64-byte
        multiples, so every dtype divides them)."""
        view = self._views.get(dtype)
        if view is None:
            view = self._views[dtype] = self._areas.view(dtype)
        return view

    def _wait(self, step: int) -> None:
        flags = self._flags
        if min(flags) >= step:
            return
        start = time.monotonic()
        pause = 0.0
        while min(flags) < step:
            waited = time.monotonic() - start
            if waited < SPIN_SECONDS:
                os.sched_yield()
                continue
            if waited > self.timeout:
                missing = [r for r in range(self.world_size) if flags[r] < step]
                raise RuntimeError(
                    f"shared-memory collective: rank {self.rank} waited {waited:.0f} s at step "
                    f"{step} for rank(s) {missing}, which never arrived (they run other "
                    "collectives, or are stuck)"
                )
            pause = min(LONGEST_SLEEP, pause * 2 or 50e-6)
            time.sleep(pause)

    def close(self) -> None:
        """Release the mapping (tensors viewing it must be gone)."""
        self._views.clear()
        for view in (self._flags, *self._sizes, self._header):
            view.release()
        del self._areas
        try:
            self._mapping.close()
        except BufferError:  # a tensor still views it: unmapped when that tensor goes
            pass


_KINDS: dict[int, tuple[str, str]] = {}  # hash -> (operation, dtype), for the error message


def _kind(operation: str, dtype: torch.dtype) -> int:
    """20 bits standing for (operation, dtype), the same in every process; a rank publishes
    them with the number of elements above them."""
    name = str(dtype).removeprefix("torch.")
    kind = zlib.crc32(f"{operation}/{name}".encode()) & 0xFFFFF
    _KINDS[kind] = (operation, name)
    return kind


def _describe(code: int) -> str:
    """What a rank published, as far as this process can tell from its code."""
    numel, kind = code >> 20, code & 0xFFFFF
    if kind in _KINDS:
        operation, dtype = _KINDS[kind]
        return f"{operation} of {numel} {dtype}"
    return f"another collective or dtype, of {numel} elements"


def _contiguous_cpu(name: str, tensor: Any) -> torch.Tensor:
    """``tensor`` as a flat view, if it is a contiguous CPU tensor."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
        raise invalid(name, tensor, "expected a CPU tensor", TypeError)
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous for a shared-memory collective")
    return tensor.view(-1)


def _no_exchange() -> None:
    """What a pickled or copied exchange becomes."""
    return None


def dist_all(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank of the default process group."""
    import torch.distributed as dist

    value = torch.tensor([0 if flag else 1])
    dist.all_reduce(value)
    return int(value) == 0


def _create_file(size: int) -> str | None:
    """A new file of ``size`` bytes with its memory reserved (None where there is no room)."""
    path = shared_memory_path(os.getppid(), uuid.uuid4().hex[:12])  # the kernel cleans up
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError:
        return None
    try:
        # Reserve the pages now: a full tmpfs then fails here, not with SIGBUS at first touch.
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        remove(path)
        return None
    os.close(fd)
    return path


def _open(path: str, size: int) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
