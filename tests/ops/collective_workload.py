"""Random collectives run through both CPU transports and compared: the differential test
(``test_shared_memory_differential.py``) and the soak (``benchmarks/shm_soak.py``) share them.

A workload is a seed and a count. From them every rank, and the kernel, derive the same list of
calls (:func:`calls`): ``reduce`` (sum or mean), ``gather``, ``broadcast``, ``gather_object`` or
``broadcast_object_list`` of one tensor or of a nested dict of tensors, with random dtypes and shapes (empty ones included) and random values,
special ones included (signed zeros, subnormals, huge values, infinities, NaN), at random places
or at the same places on every rank. A rank's input to
call ``i`` depends only on (seed, rank, world size, i) (:func:`inputs`), so the kernel rebuilds every rank's
inputs to check the results against what they must be.

:func:`run` runs a workload in a launched rank and returns its results; :func:`compare` checks two
launches of the same workload (shared memory and gloo) against each other and against the
expected values:

* bit for bit (NaN equal to NaN, -0.0 different from 0.0): the two transports, everywhere, and
  every rank against rank 0;
* bit for bit against the exact result: gathers and broadcasts (of tensors and of objects),
  integer and bool sums and means, and anything empty;
* within :func:`sum_bound` of the sum computed in float64 (complex128): floating-point sums and
  means of finite inputs.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Any

import torch

# Every dtype gloo can reduce on the CPU (it refuses int16, the unsigned types but uint8, and
# the float8 types).
DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
)
OPERATIONS = ("sum", "mean", "gather", "broadcast", "gather_object", "broadcast_object_list")
# Slot sizes the workers' exchange may use: a few hundred bytes chunks nearly every tensor; 0
# keeps the communicator's own size.
SLOT_BYTES = (256, 1024, 0)


@dataclass(frozen=True)
class Call:
    """One collective: the operation, whether the tensors travel as a nested dict, each tensor's
    dtype and shape, the source rank of a broadcast."""

    operation: str
    nested: bool
    leaves: tuple[tuple[torch.dtype, tuple[int, ...]], ...]
    src: int
    probe: bool = False  # inputs that show the order of the additions (see inputs)

    def describe(self) -> str:
        leaves = ", ".join(f"{str(d).removeprefix('torch.')}{list(s)}" for d, s in self.leaves)
        return f"{self.operation}({'dict: ' if self.nested else ''}{leaves})"


def _shape(rng: random.Random, large: float) -> tuple[int, ...]:
    roll = rng.random()
    if roll < large / 20:  # several of gloo's 1 MiB segments per rank
        return (rng.randint(1_600_000, 2_000_000),)
    if roll < large:  # many slots, several gloo segments
        return (rng.randint(2_000, 70_000),)
    if roll < large + 0.08:  # empty
        return tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 2))) + (0,)
    return tuple(rng.randint(1, 9) for _ in range(rng.randint(0, 3)))


def edges(world: int) -> list[Call]:
    """Sums whose sizes sit at the edges of gloo's ring regions: at the size where a region
    holds two segments of 1 MiB, one element more (three segments), and an odd size whose region
    boundaries split complex numbers. Their inputs show the order of the additions."""
    sizes = {
        torch.float32: (0, 1),
        torch.bfloat16: (1,),
        torch.complex64: (2**16 + 3,),
    }
    out = []
    for dtype, beyond in sizes.items():
        threshold = 2 * world * 2**20 // torch.empty((), dtype=dtype).element_size()
        out += [Call("sum", False, ((dtype, (threshold + more,)),), 0, True) for more in beyond]
    return out


def calls(
    seed: int, count: int, world: int, large: float = 0.01, with_edges: bool = False
) -> list[Call]:
    """The workload: ``count`` calls, the same wherever they are derived from ``seed``.

    ``large``: the share of tensors of thousands of elements or more. ``with_edges``: the
    workload starts with :func:`edges` (not counted in ``count``).
    """
    rng = random.Random(seed)
    out = edges(world) if with_edges else []
    for _ in range(count):
        operation = rng.choice(OPERATIONS)
        nested = rng.random() < 0.4
        # A dict of several tensors, some of the same dtype: those are packed into one message.
        dtypes = rng.sample(DTYPES, 3)
        n = rng.randint(1, 7) if nested else 1
        leaves = tuple((rng.choice(dtypes), _shape(rng, large)) for _ in range(n))
        out.append(Call(operation, nested, leaves, rng.randrange(world)))
    return out


def _specials(dtype: torch.dtype) -> list[float]:
    info = torch.finfo(dtype)
    return [
        0.0,
        -0.0,
        1.0,
        -1.0,
        info.tiny,
        -info.tiny,
        info.smallest_normal / 2**3,  # subnormal
        -info.smallest_normal / 2**3,
        info.max / 4,
        -info.max / 4,
        float("inf"),
        float("-inf"),
        float("nan"),
    ]


def _floats(
    gen: torch.Generator, shared: torch.Generator, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    """Random values; ``shared`` draws the same numbers on every rank."""
    real = dtype.to_real() if dtype.is_complex else dtype
    work = (*shape, 2) if dtype.is_complex else shape
    scale = 10.0 ** int(torch.randint(-4, 4, (), generator=gen))
    values = torch.randn(work, generator=gen, dtype=torch.float64) * scale
    mode = int(torch.randint(0, 4, (), generator=shared))
    if mode in (1, 2):  # special values: at the same places on every rank (1), or anywhere (2)
        draw = shared if mode == 1 else gen
        specials = torch.tensor(_specials(real), dtype=torch.float64)
        pick = torch.randint(0, len(specials), work, generator=draw)
        where = torch.rand(work, generator=draw) < 0.2
        values = torch.where(where, specials[pick], values)
    elif mode == 3:  # magnitudes far apart, so that the order of the additions shows
        values = values * 2.0 ** torch.randint(-30, 30, work, generator=gen).double()
    values = values.to(real)
    return torch.view_as_complex(values) if dtype.is_complex else values


def _value(
    gen: torch.Generator, shared: torch.Generator, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        low, high = max(info.min, -(2**62)), min(info.max, 2**62)
        return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).to(dtype)
    return _floats(gen, shared, dtype, shape)


def _probe(rank: int, world: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Element ``i`` (of the real parts and imaginary parts in a row) is 1 on rank ``i % world``
    and half a unit in the last place of 1 on the others. Their sum rounds to 1 unless the 1
    comes last, after the halves made a whole unit: each element shows which rank's value was
    added last, so a region boundary one element off changes the result."""
    real = dtype.to_real() if dtype.is_complex else dtype
    numel = 2 * math.prod(shape) if dtype.is_complex else math.prod(shape)
    half = torch.finfo(real).eps / 2
    values = torch.full((numel,), half, dtype=real)
    values[rank::world] = 1.0
    return torch.view_as_complex(values.view(-1, 2)) if dtype.is_complex else values


def inputs(seed: int, rank: int, world: int, index: int, call: Call) -> Any:
    """Rank ``rank``'s input to call ``index``: a tensor, or a nested dict of them."""
    if call.probe:
        ((dtype, shape),) = call.leaves
        return _probe(rank, world, dtype, shape)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index * 1009 + rank)
    shared = torch.Generator().manual_seed(seed * 1_000_003 + index * 1009 + 1000)
    tensors = [_value(gen, shared, dtype, shape) for dtype, shape in call.leaves]
    if not call.nested:
        return tensors[0]
    data: dict[str, Any] = {"first": tensors[0], "inner": {"pair": tensors[1:3]}}
    data.update({f"more{i}": t for i, t in enumerate(tensors[3:])})
    return data


def tensors_of(data: Any) -> list[torch.Tensor]:
    """The tensors of a result, in the order of the call's leaves."""
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, dict):
        return [t for v in data.values() for t in tensors_of(v)]
    return [t for v in data for t in tensors_of(v)]


def digest(results: list[Any]) -> list[str]:
    """A short hash of each result (dtype, shape and bytes of every tensor)."""
    out = []
    for result in results:
        h = hashlib.blake2b(digest_size=12)
        for t in tensors_of(result):
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(_bytes(t).numpy().tobytes())
        out.append(h.hexdigest())
    return out


def run(
    seed: int, count: int, slot_bytes: int = 0, large: float = 0.01, with_edges: bool = False
) -> dict[str, Any]:
    """Run the workload in a launched rank: rank 0's results, every rank's digests.

    ``slot_bytes``: the shared-memory slot per rank (0: the communicator's default).
    """
    from notebook_launcher import PartialState, ops
    from notebook_launcher.backends.cpu import SharedMemoryCommunicator
    from notebook_launcher.ops.communicator import current

    state = PartialState()
    if slot_bytes:  # read by the first collective, which creates the exchange
        SharedMemoryCommunicator.EXCHANGE_BYTES = slot_bytes * 2 * state.num_processes
    results = []
    for index, call in enumerate(calls(seed, count, state.num_processes, large, with_edges)):
        data = inputs(seed, state.process_index, state.num_processes, index, call)
        if call.operation in ("sum", "mean"):
            results.append(ops.reduce(data, reduction=call.operation))
        elif call.operation == "gather":
            results.append(ops.gather(data))
        elif call.operation == "broadcast":
            results.append(ops.broadcast(data, from_process=call.src))
        elif call.operation == "gather_object":
            results.append(ops.gather_object(data))
        else:
            results.append(ops.broadcast_object_list([data], from_process=call.src))
    exchange = getattr(current(), "_exchange", None)
    return {
        "results": results if state.process_index == 0 else None,
        "digests": digest(results),
        "slot_bytes": exchange.slot_bytes if exchange is not None else None,
        "steps": exchange._step if exchange is not None else None,  # chunks and calls moved
    }


# -- comparing -------------------------------------------------------------------------------------


def _bytes(t: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.reshape(-1))
    if flat.dtype is torch.bool:
        return flat.view(torch.uint8)
    return flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bits, any NaN equal to any NaN."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        nan_a, nan_b = a.isnan(), b.isnan()
        if not torch.equal(nan_a, nan_b):
            return False
        if bool(nan_a.any()):
            a, b = a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0)
    return torch.equal(_bytes(a), _bytes(b))


UNIT_ROUNDOFF = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}


def sum_bound(dtype: torch.dtype, world: int, magnitude: torch.Tensor) -> torch.Tensor:
    """How far a sum of ``world`` values in ``dtype``, rounded after each addition (in any
    order), may be from the exact sum: ``(world - 1) * u * sum(|x|)`` (u: the dtype's unit
    roundoff, 2**-11 float16, 2**-8 bfloat16, 2**-24 float32, 2**-53 float64, per component
    for complex), plus ``world`` of the dtype's smallest subnormals for underflow.

    ``magnitude``: the sum of the absolute values, per element (float64).
    """
    real = dtype.to_real() if dtype.is_complex else dtype
    u = UNIT_ROUNDOFF[real] * 1.01 + 2.0**-53  # margin: half types add in float32 first; the
    # float64 reference rounds too
    subnormal = torch.finfo(real).smallest_normal * torch.finfo(real).eps
    return (world - 1) * u * magnitude + 2 * world * subnormal


def _expected_exact(call: Call, world: int, ins: list[list[torch.Tensor]], leaf: int) -> Any:
    """The exact result's tensor ``leaf`` where one exists (else None: a floating sum)."""
    if call.operation == "gather_object":  # every rank's object, in rank order
        return [t for tensors in ins for t in tensors][leaf]
    if call.operation == "broadcast_object_list":
        return ins[call.src][leaf]
    parts = [ins[r][leaf] for r in range(world)]
    dtype = parts[0].dtype
    if call.operation == "gather":
        return torch.cat([p.reshape(1) if p.ndim == 0 else p for p in parts])
    if call.operation == "broadcast":
        return parts[call.src]
    floating = dtype.is_floating_point or dtype.is_complex
    if floating and parts[0].numel():
        return None
    if dtype is torch.bool:
        parts = [p.to(torch.int64) for p in parts]
    total = parts[0].clone()
    for p in parts[1:]:
        total += p  # integers wrap around, as gloo's do
    return total if call.operation == "sum" else total / world


def _check_float(call: Call, world: int, parts: list[torch.Tensor], got: torch.Tensor) -> str:
    """'' where ``got`` is within the bound of the float64 sum (or mean), else why not."""
    complex_ = got.dtype.is_complex
    wide = torch.complex128 if complex_ else torch.float64
    stack = torch.stack([p.to(wide) for p in parts])
    if complex_:  # components side by side: [world, ..., 2]
        stack, got = torch.view_as_real(stack), torch.view_as_real(got)
    exact = stack.sum(0)
    magnitude = stack.abs().sum(0)
    real = got.dtype
    u, tiny = UNIT_ROUNDOFF[real], torch.finfo(real).smallest_normal * torch.finfo(real).eps
    bound = sum_bound(real, world, magnitude)
    usable = stack.isfinite().all(0) & (magnitude < torch.finfo(real).max / 8)
    if call.operation == "mean":
        exact = exact / world
        size = exact.abs()
        if complex_:  # a complex quotient's error is relative to its modulus, not to each part
            size = exact.norm(dim=-1, keepdim=True).expand_as(exact)
        bound = bound / world + 4 * u * size + 2 * tiny  # one rounding more: the division
    if complex_:  # both parts usable, or neither (a huge part spoils the other's division)
        usable = usable.all(-1, keepdim=True).expand_as(usable)
    error = (got.to(torch.float64) - exact).abs()
    bad = usable & ~(error <= bound)
    if not bool(bad.any()):
        # Where an input is not finite or the sum nears the dtype's range, rounding decides
        # between NaN and infinity: there only the comparison with gloo applies.
        return ""
    i = int(bad.reshape(-1).nonzero()[0, 0])
    got_i, exact_i = got.reshape(-1)[i].item(), exact.reshape(-1)[i].item()
    return (
        f"{int(bad.sum())} elements off the float64 result by more than the bound, e.g. "
        f"{got_i!r} against {exact_i!r} (bound {bound.reshape(-1)[i].item():.3g})"
    )


@dataclass
class Report:
    """What :func:`compare` found."""

    calls: int = 0
    tensors: int = 0
    exact: int = 0  # tensors checked bit for bit against the exact result
    bounded: int = 0  # floating sums checked against the bound
    differences: list[str] = field(default_factory=list)

    def add(self, other: Report) -> None:
        self.calls += other.calls
        self.tensors += other.tensors
        self.exact += other.exact
        self.bounded += other.bounded
        self.differences += other.differences


def compare(
    seed: int,
    count: int,
    world: int,
    shared: list[dict],
    gloo: list[dict],
    large: float = 0.01,
    with_edges: bool = False,
    check_expected: bool = True,
) -> Report:
    """Check the launches' results (``shared`` and ``gloo``: every rank's :func:`run`) against
    each other, rank against rank, and against what they must be."""
    report = Report()
    for name, launch in (("shared memory", shared), ("gloo", gloo)):
        mine = digest(launch[0]["results"])
        for rank in range(1, world):
            bad = [
                i
                for i, (a, b) in enumerate(zip(mine, launch[rank]["digests"], strict=True))
                if a != b
            ]
            report.differences += [
                f"{name}: rank {rank} differs from rank 0 in call {i}" for i in bad
            ]
    for index, call in enumerate(calls(seed, count, world, large, with_edges)):
        report.calls += 1
        ours = tensors_of(shared[0]["results"][index])
        theirs = tensors_of(gloo[0]["results"][index])
        ins = None
        for leaf, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            report.tensors += 1
            where = f"call {index} {call.describe()} tensor {leaf}"
            if not same_bits(a, b):
                report.differences.append(
                    f"{where}: shared memory and gloo differ ({_first(a, b)})"
                )
            if not check_expected:
                continue
            if ins is None:
                ins = [tensors_of(inputs(seed, r, world, index, call)) for r in range(world)]
            expected = _expected_exact(call, world, ins, leaf)
            if expected is None:
                report.bounded += 1
                why = _check_float(call, world, [ins[r][leaf] for r in range(world)], a)
                if why:
                    report.differences.append(f"{where}: {why}")
            else:
                report.exact += 1
                if not same_bits(a, expected):
                    report.differences.append(
                        f"{where}: not the exact result ({_first(a, expected)})"
                    )
    return report


def _first(a: torch.Tensor, b: torch.Tensor) -> str:
    """The first difference between ``a`` and ``b``, in words."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    size = flat_a.element_size()
    differ = (_bytes(flat_a).view(-1, size) != _bytes(flat_b).view(-1, size)).any(1)
    if flat_a.dtype.is_floating_point or flat_a.dtype.is_complex:
        differ = (differ & ~(flat_a.isnan() & flat_b.isnan())) | (flat_a.isnan() != flat_b.isnan())
    i = int(differ.nonzero()[0, 0])
    return f"element {i}: {flat_a[i].item()!r} against {flat_b[i].item()!r}"


# -- killing a rank inside collectives ---------------------------------------------------------

# Places in the exchange where a rank can kill itself (see kill_trial): the line about to run.
KILL_LINES = {
    "before publishing the step": "header[self._mine + FLAG] = step",
    "after publishing, before waiting": "self._wait(step)",
    "after waiting, before checking the calls": "for words in records:",
    "before adding the slots": "self._add(area, chunk, begin, region)",
    "in the middle of the additions": "torch.add(area[(j - k) % world, lo:hi], acc, out=acc)",
    "before copying the gathered slots": "rows[:, begin : begin + chunk.numel()].copy_(area)",
    "before copying the broadcast slot": "chunk.copy_(area[src])",
    "while sleeping in the wait": "ended = self._peers.ended(pause)",
}


def _kill_at(text: str, hit: int) -> None:
    """SIGKILL this process the ``hit``-th time the exchange is about to run the line ``text``
    (after writing the time to ``kill_at.time`` in the working directory)."""
    import linecache
    import os
    import signal
    import sys
    import time

    from notebook_launcher.backends import shared_memory

    path = shared_memory.__file__
    lines = linecache.getlines(path)
    numbers = {i + 1 for i, line in enumerate(lines) if line.strip() == text}
    assert numbers, f"no line {text!r} in {path}"
    hits = 0

    def local(frame, event, arg):
        nonlocal hits
        if event == "line" and frame.f_lineno in numbers:
            hits += 1
            if hits == hit:
                with open("kill_at.time", "w") as out:
                    out.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename == path else None

    sys.settrace(calls)


def collectives_until_killed(folder: str, kill_line: str | None, hit: int, child: bool) -> None:
    """A rank that runs collectives of every kind until it is killed (or kills itself: rank 1,
    at the ``hit``-th run of ``kill_line``). ``child``: every rank starts a process first (as a
    DataLoader with workers does), which keeps the rank's pipes open after it dies."""
    import os
    import time

    from notebook_launcher import PartialState, ops

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    os.chdir(folder)
    if child:
        import multiprocessing

        helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        helper.daemon = True  # as a DataLoader's workers are
        helper.start()
    big = torch.ones(300_000)  # several chunks of the default slots
    metrics = {"loss": torch.ones(()), "counts": torch.arange(5), "hits": torch.ones(3) > 0}
    ops.reduce(torch.ones(1))  # the exchange is made
    with open(f".{rank}", "w") as out:
        out.write(str(os.getpid()))
    os.rename(f".{rank}", f"ready{rank}")
    if kill_line is not None and rank == 1:
        _kill_at(kill_line, hit)
    step = 0
    while True:
        step += 1
        if rank == 0 and step % 5 == 0:
            time.sleep(0.01)  # the others wait long enough to sleep in their wait
        ops.reduce(big)
        ops.gather(metrics)
        ops.broadcast(torch.ones(1000), from_process=step % world)
        ops.reduce(metrics, reduction="sum")
        if step % 10 == 0:
            ops.gather_object(step)


@dataclass
class Killed:
    """How one kill trial ended."""

    world: int
    victim: int
    seconds: float  # from the kill to the exception in the caller
    error: str


def kill_trial(
    folder: str,
    world: int,
    rng: random.Random,
    kill_line: str | None = None,
    child: bool = False,
    timeout: float = 60,
) -> Killed:
    """Launch ``world`` ranks running :func:`collectives_until_killed` and kill one: from here
    after a random delay (``rng``), or where ``kill_line`` says (rank 1 kills itself there).
    Measures the time from the kill to the launch's exception."""
    import os
    import signal
    import threading
    import time

    from notebook_launcher import notebook_launcher

    victim = 1 if kill_line is not None else rng.randrange(world)
    hit = rng.randint(1, 40)
    delay = rng.uniform(0.0, 0.25)
    killed_at: list[float] = []

    def kill() -> None:
        paths = [os.path.join(folder, f"ready{r}") for r in range(world)]
        while not all(os.path.exists(p) for p in paths):
            time.sleep(0.002)
        with open(paths[victim]) as ready:
            pid = int(ready.read())
        time.sleep(delay)
        killed_at.append(time.time())
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True) if kill_line is None else None
    if killer is not None:
        killer.start()
    try:
        notebook_launcher(
            collectives_until_killed,
            args=(folder, kill_line, hit, child),
            num_processes=world,
            timeout=timeout,
            output="none",
            ui="none",
        )
    except Exception as error:  # whatever the launch raises is the report
        raised, message = time.time(), f"{type(error).__name__}: {error}"
    else:
        raise AssertionError("the launch returned although a rank was killed")
    if killer is not None:
        killer.join(5)
        if not killed_at:
            raise AssertionError(f"the launch failed before the kill: {message}")
    else:
        with open(os.path.join(folder, "kill_at.time")) as stamp:
            killed_at.append(float(stamp.read()))
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    return Killed(world, victim, raised - killed_at[0], message)
