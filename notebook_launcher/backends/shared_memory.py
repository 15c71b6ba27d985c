"""Collectives through shared memory, for the CPU processes of one machine.

Gloo moves a CPU job's tensors over loopback TCP. Every collective is a chain of hand-offs
between each rank's thread and gloo's threads, and on a machine with one core per process each
hand-off waits for the scheduler: on 2 cores a 300 KB all-reduce that takes about 0.3 ms back to
back takes about 1 ms between training steps. When every rank runs on this machine,
:class:`SharedMemoryExchange` exchanges tensors through one shared mapping instead, for DDP's
gradients (the DDP hook in :mod:`.cpu`) and for the collectives of :mod:`notebook_launcher.ops`
(all-reduce, all-gather, broadcast, the object collectives as pickles, and the barrier of
``wait_for_everyone`` as a step without data):

* each rank copies its tensor (already scaled, for DDP's average) into its own slot, writes what
  it did (operation, dtype, elements in the call, where this chunk starts) and then publishes
  the step number in its own flag: one writer per word, so no atomic operation is needed;
* every rank waits until all flags reached the step, checks that every rank did the same (else
  it raises a ValueError naming what each rank did, on every rank, where gloo would hang, mix
  the data up or abort), then reads: an all-gather copies every slot, a broadcast the source's,
  and an all-reduce adds the slots one at a time, rounding after each addition in the tensor's
  dtype, in the order gloo's ring all-reduce adds them (:func:`ring_region`). Every rank makes
  the same additions, so the results are identical everywhere, and identical to gloo's, bit for
  bit (NaN payloads aside);
* two areas alternate, so a rank never overwrites a slot that a slower rank still reads (to
  write step ``s + 2`` every rank must have published ``s + 1``, after reading step ``s``).

Tensors larger than a slot go through in slot-sized chunks. The mapping is a file in
``/dev/shm`` that is unlinked as soon as every rank has opened it (and removed by the launcher
if a rank dies first), so nothing is left behind. Waiting spins briefly, then sleeps in
``poll`` on the other ranks' process descriptors, so a rank that waits for a hung peer uses
almost no CPU (the launcher's stall check still sees the hang) and a peer that ends (killed,
crashed, or returned from its function) wakes it at once: it raises
``torch.distributed.DistBackendError`` naming that rank. Past ``timeout`` seconds it raises,
naming the ranks that never arrived.

The exchange relies on x86's store ordering (a slot's bytes are visible before the flag written
after them), so it is used on x86-64 Linux only; elsewhere, and when
``NOTEBOOK_LAUNCHER_SHARED_MEMORY=0``, gloo carries the tensors.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import platform
import select
import struct
import sys
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from ..protocol.shared_files import SHARED_MEMORY_DIRECTORY, create_file, remove
from ..utils.validation import check_int, check_number, invalid

ENV_SWITCH = "NOTEBOOK_LAUNCHER_SHARED_MEMORY"
BUDGET = 32 * 2**20  # bytes of shared memory for the two areas of all ranks together
# The header: one 64-byte line per rank, written by that rank only. Its words: the last step
# the rank published, its pid, then per area what it did at that area's last step (operation
# and dtype, elements in the call, where the chunk starts in it).
LINE_WORDS = 8
FLAG, PID = 0, 1
WHAT, TOTAL, OFFSET = 2, 3, 4  # + 3 * area
MOST_RANKS = 1024
SPIN_SECONDS = 0.002  # busy-wait (with yields) this long before sleeping between checks
LONGEST_SLEEP = 0.005
DEFAULT_TIMEOUT = 1800.0
# Gloo's ring all-reduce cuts a buffer into at least two segments per rank, of at most this many
# bytes each; see ring_region.
GLOO_SEGMENT_BYTES = 2**20

# What a rank did at a step (the low byte of its WHAT word).
ALL_REDUCE, ALL_REDUCE_SHARES, ALL_GATHER, BROADCAST, GATHER_OBJECT, BROADCAST_OBJECTS = range(1, 7)
BARRIER = 7
OPERATIONS = {
    ALL_REDUCE: "all_reduce",
    ALL_REDUCE_SHARES: "all_reduce of shares",
    ALL_GATHER: "all_gather",
    BROADCAST: "broadcast",
    GATHER_OBJECT: "all_gather_object",
    BROADCAST_OBJECTS: "broadcast_object_list",
    BARRIER: "barrier (wait_for_everyone)",
}
# Every dtype, in an order every process of this torch agrees on.
DTYPES = tuple(sorted({d for d in vars(torch).values() if isinstance(d, torch.dtype)}, key=str))
_DTYPE_INDEX = {d: i for i, d in enumerate(DTYPES)}


def header_bytes(world_size: int) -> int:
    """Bytes before the areas: a line per rank, rounded up to whole pages."""
    return -(-world_size * LINE_WORDS * 8 // 4096) * 4096


def ring_region(elements: int, element_size: int, world_size: int) -> int:
    """How many elements of a buffer gloo's ring all-reduce reduces in each rank's region.

    Gloo cuts a buffer of ``elements`` into ``world_size`` regions of this many elements (the
    last ones shorter or empty). The sum of region ``j`` starts with rank ``j - 1``'s values and
    goes down the ring, each rank adding its own to what it received: rank ``j - 2``, then
    ``j - 3`` ... and rank ``j`` last. The region holds a whole number of segments, at least two
    per rank, each at most ``GLOO_SEGMENT_BYTES``, all of the same size (rounded up to whole
    elements).
    """
    total = elements * element_size
    most = element_size * max(1, GLOO_SEGMENT_BYTES // element_size)
    segments = max(-(-total // most), 2 * world_size)
    segments = -(-segments // world_size) * world_size
    segment = -(-total // segments)
    segment = -(-segment // element_size) * element_size
    return segments // world_size * (segment // element_size)


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
    """All-reduce, all-gather, broadcast and barrier over the ranks of one machine, through a
    shared mapping.

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
        header = self._header = memoryview(mapping)[: world_size * LINE_WORDS * 8].cast("q")
        self._flags = header[FLAG::LINE_WORDS]  # per rank: the last step it published
        # Per area, then per rank: what it did at the area's last step (two, like the areas, so
        # that a rank one step ahead does not overwrite what a slower one checks).
        self._records = [
            tuple(header[word + 3 * area :: LINE_WORDS] for word in (WHAT, TOTAL, OFFSET))
            for area in (0, 1)
        ]
        self._mine = self.rank * LINE_WORDS
        self._areas = torch.frombuffer(
            mapping,
            dtype=torch.uint8,
            count=2 * world_size * slot_bytes,
            offset=header_bytes(world_size),
        ).view(2, world_size, slot_bytes)
        self._views: dict[torch.dtype, torch.Tensor] = {}
        self._step = 0
        # Counterparts on the other ranks have the same serial: exchanges are made collectively,
        # so in the same order everywhere.
        self.serial = next(_SERIALS)
        pids = {r: pid for r, pid in enumerate(header[PID::LINE_WORDS]) if r != rank and pid > 0}
        self._peers = _Peers(pids)
        self._pid_words = header[PID::LINE_WORDS]  # negative: that rank has left the job
        _OPEN.add(self)
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
        alone = state.local_num_processes != world  # ranks on other machines
        if world < 2 or world > MOST_RANKS or alone or not on_gloo:
            return None
        # Every rank decides alike: the environment may differ, so agree on it.
        usable = dist_all(supported())
        if not usable:
            return None
        slot = max(64, min(int(needed_bytes), BUDGET // (2 * world)) // 64 * 64)
        size = header_bytes(world) + 2 * world * slot
        names: list[Any] = [None]
        created = None
        if state.process_index == 0:
            created = _create_file(size)
            names[0] = created
        dist.broadcast_object_list(names, src=0)
        mapping = _open(names[0], size) if names[0] else None
        if mapping is not None:  # every rank's pid, for the others to watch while they wait
            struct.pack_into(
                "q", mapping, (state.process_index * LINE_WORDS + PID) * 8, os.getpid()
            )
        everyone = dist_all(mapping is not None)  # after it, every pid is written
        if created:  # every rank has its mapping (or gave up): nothing is left behind
            remove(created)
        if not everyone:
            if mapping is not None:
                mapping.close()
            return None
        return cls(mapping, state.process_index, world, slot, timeout)

    @property
    def steps(self) -> int:
        """The steps this rank has taken (each collective takes one or more)."""
        return self._step

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # A copy or pickle of the model (DDP keeps its hooks' states) carries no mapping:
        # DDP does not register a copy's hooks again, and no other process could use it.
        return _no_exchange, ()

    def all_reduce_(self, tensor: torch.Tensor, divisor: int | None = None) -> torch.Tensor:
        """Sum ``tensor`` (contiguous) over the ranks in place, in gloo's order (see the module's
        docstring), each share first multiplied by ``1 / divisor`` when one is given (as DDP
        scales gradients, so the average is the one DDP computes over gloo).

        Every rank must call it with a tensor of the same size and dtype, in the same order.
        """
        flat = _contiguous_cpu("tensor", tensor)
        operation = ALL_REDUCE
        if divisor is not None:
            check_int("divisor", divisor, 1)
            if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
                raise invalid("divisor", divisor, f"{tensor.dtype} cannot be divided in place")
            operation = ALL_REDUCE_SHARES
        what = _what(operation, tensor.dtype)
        # Gloo adds complex numbers as pairs of reals; so do the chunks and regions here.
        real = torch.view_as_real(flat).view(-1) if flat.is_complex() else flat
        pair = 2 if flat.is_complex() else 1
        region = ring_region(real.numel(), real.element_size(), self.world_size)
        for begin, chunk, area in self._chunks(real):
            if divisor is None:
                area[self.rank].copy_(chunk)
            else:
                torch.mul(chunk, 1.0 / divisor, out=area[self.rank])
            self._publish(what, flat.numel(), begin // pair)
            self._add(area, chunk, begin, region)
        return tensor

    def all_gather_(
        self, output: torch.Tensor, tensor: torch.Tensor, operation: int = ALL_GATHER
    ) -> torch.Tensor:
        """Fill ``output`` (contiguous, ``world_size`` times ``tensor``'s elements) with every
        rank's ``tensor`` in rank order."""
        flat = _contiguous_cpu("tensor", tensor)
        rows = _contiguous_cpu("output", output).view(self.world_size, -1)
        if rows.shape[1] != flat.numel() or output.dtype != tensor.dtype:
            raise invalid(
                "output", tuple(output.shape), "expected world_size times the tensor's elements"
            )
        what = _what(operation, flat.dtype)
        for begin, chunk, area in self._chunks(flat):
            area[self.rank].copy_(chunk)
            self._publish(what, flat.numel(), begin)
            rows[:, begin : begin + chunk.numel()].copy_(area)
        return output

    def broadcast_(
        self, tensor: torch.Tensor, src: int, operation: int = BROADCAST
    ) -> torch.Tensor:
        """Overwrite ``tensor`` (contiguous) with rank ``src``'s, in place."""
        flat = _contiguous_cpu("tensor", tensor)
        check_int("src", src, 0)
        if src >= self.world_size:
            raise invalid("src", src, f"ranks are numbered 0 to {self.world_size - 1}")
        what = _what(operation, flat.dtype, src)
        for begin, chunk, area in self._chunks(flat):
            if self.rank == src:
                area[src].copy_(chunk)
            self._publish(what, flat.numel(), begin)
            if self.rank != src:
                chunk.copy_(area[src])
        return tensor

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's (picklable) ``obj``, in rank order: the sizes of the pickles, then the
        pickles, padded to the longest, through the exchange."""
        mine = _pickled(obj)
        sizes = torch.empty(self.world_size, dtype=torch.int64)
        self.all_gather_(sizes, torch.tensor([mine.numel()]), GATHER_OBJECT)
        longest = int(sizes.max())
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: mine.numel()] = mine
        rows = torch.empty(self.world_size, longest, dtype=torch.uint8)
        self.all_gather_(rows, padded, GATHER_OBJECT)
        return [_unpickled(row[:size]) for row, size in zip(rows, sizes.tolist(), strict=True)]

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        """Overwrite the items of ``objects`` with rank ``src``'s (a list of as many picklable
        objects), in place: the sizes of the pickles, then the pickles, through the exchange."""
        pickles = [_pickled(o) for o in objects] if self.rank == src else []
        sizes = torch.tensor([p.numel() for p in pickles] or [0] * len(objects))
        self.broadcast_(sizes, src, BROADCAST_OBJECTS)
        payload = (
            torch.cat(pickles) if pickles else torch.empty(int(sizes.sum()), dtype=torch.uint8)
        )
        self.broadcast_(payload, src, BROADCAST_OBJECTS)
        if self.rank != src:
            parts = torch.split(payload, sizes.tolist())
            objects[:] = [_unpickled(part) for part in parts]

    def barrier(self, timeout: float | None = None) -> None:
        """Wait until every rank reaches its barrier (``timeout`` seconds at most, else the
        exchange's).

        A step that moves no data but is recorded like any other: a rank that meets another
        rank's collective at this step raises the mismatch at once, where a barrier outside the
        exchange would leave both waiting for each other until the timeout.
        """
        self._step += 1
        step = self._record(_what(BARRIER, torch.uint8), 0, 0)
        self._wait(step, timeout)
        self._check(step)

    def _chunks(self, flat: torch.Tensor) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """Slot-sized pieces of ``flat``: where each starts, the piece, and the area of its step
        ([world, elements])."""
        view = self._view(flat.dtype)
        per_slot = view.shape[-1]
        for begin in range(0, max(flat.numel(), 1), per_slot):
            chunk = flat[begin : begin + per_slot]
            self._step += 1
            yield begin, chunk, view[self._step % 2, :, : chunk.numel()]

    def _add(self, area: torch.Tensor, out: torch.Tensor, begin: int, region: int) -> None:
        """``out`` = the sum of the slots in ``area`` (a chunk starting at element ``begin`` of
        a buffer whose rank regions hold ``region`` elements), added in gloo's ring order."""
        world = self.world_size
        if world == 2:  # one addition: the order cannot matter
            torch.add(area[0], area[1], out=out)
            return
        end = begin + out.numel()
        start = begin
        while start < end:
            j = start // region
            stop = min(end, (j + 1) * region)
            lo, hi = start - begin, stop - begin
            acc = out[lo:hi]
            # Region j starts with rank j - 1's values; each next rank down adds its own.
            torch.add(area[(j - 2) % world, lo:hi], area[(j - 1) % world, lo:hi], out=acc)
            for k in range(3, world + 1):
                torch.add(area[(j - k) % world, lo:hi], acc, out=acc)
            start = stop

    def _publish(self, what: int, total: int, offset: int) -> None:
        """Say this rank's slot is written, wait for every rank, and check they all did the same
        (operation, dtype, elements in the call, where this chunk starts in it)."""
        step = self._record(what, total, offset)
        self._wait(step)
        self._check(step)

    def _record(self, what: int, total: int, offset: int) -> int:
        """Write what this rank does at the current step, then publish the step (the flag last,
        so that a rank that sees the flag reads this step's record); returns the step."""
        step = self._step
        header, mine = self._header, self._mine + 3 * (step % 2)
        header[mine + WHAT] = what
        header[mine + TOTAL] = total
        header[mine + OFFSET] = offset
        header[self._mine + FLAG] = step
        return step

    def _check(self, step: int) -> None:
        """Raise if the ranks recorded different calls at ``step`` (every rank published it)."""
        records = self._records[step % 2]
        for words in records:
            if min(words) != max(words):
                self._mismatch(step, records)

    def _mismatch(self, step: int, records: tuple[memoryview, ...]) -> None:
        whats, totals, offsets = (words.tolist() for words in records)
        calls = "; ".join(
            f"rank {r}: {_describe(whats[r], totals[r], offsets[r])}" for r in range(len(whats))
        )
        raise ValueError(
            f"shared-memory collective: the ranks made different calls at step {step}: {calls} "
            "(every rank must run the same collectives, on tensors of the same size and dtype, "
            "in the same order)"
        )

    def _view(self, dtype: torch.dtype) -> torch.Tensor:
        """The areas as ``dtype`` elements: [2, world, elements per slot] (slots are 64-byte
        multiples, so every dtype divides them)."""
        view = self._views.get(dtype)
        if view is None:
            view = self._views[dtype] = self._areas.view(dtype)
        return view

    def _wait(self, step: int, timeout: float | None = None) -> None:
        """Until every rank published ``step`` (``timeout`` seconds at most, else the
        exchange's)."""
        limit = self.timeout if timeout is None else timeout
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
            if waited > limit:
                missing = [r for r in range(self.world_size) if flags[r] < step]
                raise RuntimeError(
                    f"shared-memory collective: rank {self.rank} waited {waited:.0f} s at step "
                    f"{step} for rank(s) {missing}, which never arrived (they run other "
                    "collectives, or are stuck)"
                )
            pause = min(LONGEST_SLEEP, pause * 2 or 50e-6)
            ended = self._peers.ended(pause)
            ended += self._departed()
            if ended:
                self._peer_ended(step, ended)

    def _departed(self) -> list[int]:
        """The peers whose function returned (their process may wait to exit, see
        :func:`depart`): they will never publish another step."""
        return [r for r in self._peers.pids if self._pid_words[r] < 0]

    def depart(self) -> None:
        """Tell the peers this rank's function returned: none of its steps will follow."""
        if self._pid_words is not None:
            self._pid_words[self.rank] = -os.getpid()

    def _peer_ended(self, step: int, ended: list[int]) -> None:
        """Some peers' processes are gone: raise if one of them never published ``step``."""
        flags = self._flags
        gone = [r for r in ended if flags[r] < step]
        if not gone:  # they published this step before ending; a later step will tell
            return
        names = ", ".join(f"{r} (pid {self._peers.pids[r]})" for r in gone)
        raise _peer_error(
            f"shared-memory collective: rank {names} ended while rank {self.rank} waited for "
            f"it at step {step} (it was killed, crashed, or returned from its function while "
            "this rank was still in a collective)"
        )

    def close(self) -> None:
        """Release the mapping (tensors viewing it must be gone)."""
        _OPEN.discard(self)
        if self._pid_words is not None:
            self._pid_words.release()
            self._pid_words = None
        self._views.clear()
        self._peers.close()
        for records in self._records:
            for words in records:
                words.release()
        for view in (self._flags, self._header):
            view.release()
        del self._areas
        try:
            self._mapping.close()
        except BufferError:  # a tensor still views it: unmapped when that tensor goes
            pass


# The exchanges this process has open, to tell their peers when its function returned.
_OPEN: weakref.WeakSet[SharedMemoryExchange] = weakref.WeakSet()


def depart() -> None:
    """This rank's function returned: every exchange it has open tells its peers, so a peer
    still waiting in a collective for it raises at once rather than waiting for this process
    to end (it may wait for its peers before it exits)."""
    for exchange in list(_OPEN):
        exchange.depart()


_SERIALS = itertools.count(1)


def steps_taken() -> tuple[int, ...]:
    """Each exchange this process has open and the steps it has taken: (serial, steps, ...),
    in the order of the serials (equal on every rank when no exchange was left half done)."""
    pairs = sorted((exchange.serial, exchange.steps) for exchange in list(_OPEN))
    return tuple(number for pair in pairs for number in pair)


def align_steps() -> None:
    """Bring every open exchange to the same step on every rank (the furthest any rank of the
    job reached): after a collective stopped half done (an interrupt, a failed peer), ranks
    stand at different steps and the next collective would meet the wrong step. Collective over
    the default process group; no data moves through the exchanges."""
    import torch.distributed as dist

    mine = {exchange.serial: exchange.steps for exchange in list(_OPEN)}
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    for exchange in list(_OPEN):
        exchange._step = max(steps.get(exchange.serial, 0) for steps in everyone)


class _Peers:
    """The other ranks' processes, watched through pidfds (Linux 5.3 and later): ``ended``
    sleeps until one of them ends or the time is up. Where pidfds are missing it sleeps, then
    looks in ``/proc``."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.pids = pids
        self._fds: dict[int, int] = {}
        self._poll = select.poll()
        for rank, pid in pids.items():
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                continue
            self._fds[fd] = rank
            self._poll.register(fd, select.POLLIN)
        self._unwatched = [r for r in pids if r not in self._fds.values()]

    def ended(self, seconds: float) -> list[int]:
        """Wait up to ``seconds``; the ranks whose process ended (checked at least once)."""
        if seconds < 0.001 or not self._fds:  # poll's clock counts whole milliseconds
            time.sleep(seconds)
            seconds = 0.0
        ready = self._poll.poll(int(seconds * 1000)) if self._fds else []
        ended = [self._fds[fd] for fd, _ in ready]
        return ended + [r for r in self._unwatched if not _running(self.pids[r])]

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    __del__ = close  # an exchange dropped without close() (a model deleted) keeps no descriptor


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (for kernels without pidfds)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _peer_error(message: str) -> Exception:
    """torch.distributed's error for a collective whose other side went away (the launcher
    reports the rank that went away first)."""
    import torch.distributed as dist

    kind = getattr(dist, "DistBackendError", RuntimeError)
    return kind(message)


def _what(operation: int, dtype: torch.dtype, src: int = 0) -> int:
    """The word a rank publishes for (operation, dtype, source rank of a broadcast)."""
    index = _DTYPE_INDEX.get(dtype, 255)
    return operation | index << 8 | src << 16


def _describe(what: int, total: int, offset: int) -> str:
    """What a rank did at a step, from the words it published."""
    operation, index, src = what & 0xFF, what >> 8 & 0xFF, what >> 16
    name = OPERATIONS.get(operation, f"operation {operation}")
    if operation in (BROADCAST, BROADCAST_OBJECTS):
        name += f" from rank {src}"
    dtype = str(DTYPES[index]).removeprefix("torch.") if index < len(DTYPES) else "?"
    if operation in (GATHER_OBJECT, BARRIER):  # sizes and dtypes of their own, or no data
        return name
    if operation == BROADCAST_OBJECTS:
        return f"{name} of {total} objects" if dtype == "int64" else f"{name} ({total} bytes)"
    text = f"{name} of {total} {dtype}"
    return text if offset == 0 else f"{text}, from element {offset}"


def _pickled(obj: Any) -> torch.Tensor:
    """``obj`` pickled, as a uint8 tensor."""
    return torch.frombuffer(
        bytearray(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8
    )


def _unpickled(data: torch.Tensor) -> Any:
    return pickle.loads(data.numpy().tobytes())


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
    return create_file(os.getppid(), uuid.uuid4().hex[:12], size)  # the kernel cleans up


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
