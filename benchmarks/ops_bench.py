"""Overhead of the collectives over raw torch.distributed and over Accelerate's utilities.

One launch of 2 gloo ranks (``notebook_launcher``). In it, every case is timed four ways on the
same process group, call by call in interleaved rounds (all 24 orders in turn):

* ``raw``         the torch.distributed calls a careful user would write by hand
* ``raw_again``   the same calls once more: ``again/raw`` shows how precise the ratios are
* ``ours``        ``notebook_launcher.ops`` (gather, broadcast, reduce, pad_across_processes)
* ``accelerate``  ``accelerate.utils`` (the same names)

Each round starts with a barrier and times one call of each; the table shows, per case, the
median time per call and the ratios again/raw, ours/raw and ours/accelerate, each the median over rounds
of the ratio within a round (paired, so that the machine's slow drifts cancel). Targets:
tensors of 1 MB or more within 1.05x of raw; a nested dict of 10 small tensors faster than
Accelerate.

On a small shared machine the gloo timings move by several percent from run to run, so a second
table isolates what each wrapper adds: the same calls with the transport replaced by local
copies (``all_gather`` copies the input into every slot, ``all_reduce`` and ``broadcast`` do
nothing), timed in a tight loop on rank 0. ``ours - raw`` there is the fixed cost of the wrapper.
The workers set glibc's mmap and trim thresholds (``mallopt``) so that MB-sized buffers are
reused by every implementation alike instead of being mapped afresh at random.

A second launch times the same cases with ``ours`` through shared memory, as it runs by default
when every rank is on this machine (``notebook_launcher.backends.shared_memory``); ``raw`` and
``accelerate`` stay on gloo there.

    python benchmarks/ops_bench.py [--rounds 2000] [--budget 8.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import itertools
import json
import os
import statistics
import sys
import time
import timeit

IMPLEMENTATIONS = ("raw", "raw_again", "ours", "accelerate")
# Every order in turn, so each implementation runs first, second and last, after each other one.
ORDERS = list(itertools.permutations(IMPLEMENTATIONS))


def _cases(world: int):
    """name -> (make input, {implementation: call}); each call does one whole operation."""
    import accelerate.utils as acc
    import torch
    import torch.distributed as dist

    from notebook_launcher import ops

    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def raw_gather(t):
        out = t.new_empty((world * t.shape[0], *t.shape[1:]))
        all_gather(out, t)
        return out

    def raw_reduce(t):
        out = t.clone()
        dist.all_reduce(out)
        return out.div_(world)

    def raw_broadcast(t):
        dist.broadcast(t, 0)
        return t

    def raw_pad(t):
        size = torch.tensor([t.shape[0]])
        sizes = torch.empty(world, dtype=size.dtype)
        all_gather(sizes, size)
        largest = int(sizes.max())
        if largest == t.shape[0]:
            return t
        out = t.new_zeros((largest, *t.shape[1:]))
        out[: t.shape[0]] = t
        return out

    def each(fn):
        return lambda d: {k: fn(v) for k, v in d.items()}

    def big(mb):
        return lambda: torch.ones(mb * 2**20 // 4)

    def nested():
        return {f"metric_{i}": torch.full((16,), float(i)) for i in range(10)}

    operations = {  # name: (raw, ours, accelerate)
        "gather": (raw_gather, ops.gather, acc.gather),
        "broadcast": (raw_broadcast, ops.broadcast, acc.broadcast),
        "reduce": (raw_reduce, ops.reduce, acc.reduce),
        "pad": (raw_pad, ops.pad_across_processes, acc.pad_across_processes),
    }
    cases = {}
    for mb in (1, 8):
        for name in ("gather", "broadcast", "reduce"):
            raw, ours, theirs = operations[name]
            calls = dict(raw=raw, raw_again=raw, ours=ours, accelerate=theirs)
            cases[f"{name} {mb} MB"] = (big(mb), calls)
    for name, (raw, ours, theirs) in operations.items():
        calls = dict(raw=each(raw), raw_again=each(raw), ours=ours, accelerate=theirs)
        cases[f"{name} dict of 10 small"] = (nested, calls)
    return cases


def steady_allocator() -> None:
    """Make glibc keep freed MB-sized buffers for reuse instead of unmapping them.

    By default a freed buffer of a few MB may go back to the system and the next allocation pays
    page faults (about 40 µs per MB here), depending on what else the heap holds: a lottery that
    moves any one implementation's timings by more than the differences measured here.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(-3, 256 * 2**20)  # M_MMAP_THRESHOLD: heap, not mmap, up to 256 MB
        mallopt(-1, 1024 * 2**20)  # M_TRIM_THRESHOLD: keep up to 1 GB of free heap


def run_in_worker(rounds: int, budget: float, with_costs: bool = True) -> dict:
    """Runs on every rank: returns {case: {implementation: [seconds of each call, ...]}}.

    Each round times one call of each implementation, in one of the 24 orders in turn, so
    that whatever disturbs the machine (or follows a particular call) falls on the three alike.
    """
    import accelerate
    import torch.distributed as dist

    from notebook_launcher import PartialState

    steady_allocator()
    state = PartialState()
    accelerate.PartialState(cpu=True)  # adopts the group created above (cpu=True: MULTI_CPU)
    timings: dict = {}
    for name, (make, calls) in _cases(state.num_processes).items():
        data = make()
        for call in calls.values():  # warm up; also checks every implementation runs
            call(data)
        # Rounds for about ``budget`` seconds, agreed by every rank so the collectives line up.
        dist.barrier()
        spent = []
        for _ in range(5):
            start = time.perf_counter()
            calls["raw"](data)
            spent.append(time.perf_counter() - start)
        count = [min(rounds, max(48, int(budget / 4 / max(statistics.median(spent), 1e-6))))]
        dist.broadcast_object_list(count, 0)
        samples: dict = {impl: [] for impl in IMPLEMENTATIONS}
        for round_ in range(count[0]):
            dist.barrier()
            for impl in ORDERS[round_ % len(ORDERS)]:
                start = time.perf_counter()
                calls[impl](data)
                samples[impl].append(time.perf_counter() - start)
        timings[name] = samples
    dist.barrier()
    costs = wrapper_costs(state.num_processes) if with_costs and state.is_main_process else None
    dist.barrier()
    return {"timings": timings, "costs": costs}


@contextlib.contextmanager
def local_transport(world: int):
    """torch.distributed's collectives replaced by local copies, for the wrappers' own cost."""
    import torch.distributed as dist

    from notebook_launcher.ops import communicator as comm

    def all_gather_single(out, tensor, *args, **kwargs):
        out.view(world, -1).copy_(tensor.reshape(1, -1))

    def all_gather(outs, tensor, *args, **kwargs):
        for out in outs:
            out.copy_(tensor)

    def nothing(*args, **kwargs):
        return None

    stubs = {
        "all_gather_single": all_gather_single,
        "all_gather_into_tensor": all_gather_single,
        "all_gather": all_gather,
        "all_reduce": nothing,
        "broadcast": nothing,
    }
    saved = {name: getattr(dist, name) for name in stubs}
    ours = comm.current()
    saved_ours = ours._all_gather
    try:
        for name, stub in stubs.items():
            setattr(dist, name, stub)
        ours._all_gather = all_gather_single
        yield
    finally:
        for name, original in saved.items():
            setattr(dist, name, original)
        ours._all_gather = saved_ours


def wrapper_costs(world: int, repeats: int = 24) -> dict:
    """{case: {implementation: best seconds per call}} with the local transport.

    The implementations take turns (in rotating orders), and each keeps its best repeat.
    """
    costs = {}
    with local_transport(world):
        for name, (make, calls) in _cases(world).items():
            data = make()
            runs = {impl: functools.partial(call, data) for impl, call in calls.items()}
            numbers = {}
            for impl, once in runs.items():
                once()
                numbers[impl] = max(1, int(0.005 / max(timeit.timeit(once, number=1), 1e-7)))
            best = dict.fromkeys(runs, float("inf"))
            for repeat in range(repeats):
                for impl in ORDERS[repeat % len(ORDERS)]:
                    seconds = timeit.timeit(runs[impl], number=numbers[impl]) / numbers[impl]
                    best[impl] = min(best[impl], seconds)
            costs[name] = best
    return costs


def _paired(ours: list[float], other: list[float]) -> float:
    """Median over rounds of ours/other within the round: slow drifts of the machine cancel."""
    return statistics.median(a / b for a, b in zip(ours, other, strict=True))


def summarize(timings: dict) -> list[dict]:
    rows = []
    for name, by_impl in timings.items():
        med = {impl: statistics.median(values) for impl, values in by_impl.items()}
        rows.append(
            {
                "case": name,
                "rounds": len(by_impl["raw"]),
                **{f"{impl}_us": round(med[impl] * 1e6, 1) for impl in IMPLEMENTATIONS},
                "again/raw": round(_paired(by_impl["raw_again"], by_impl["raw"]), 3),
                "ours/raw": round(_paired(by_impl["ours"], by_impl["raw"]), 3),
                "ours/accelerate": round(_paired(by_impl["ours"], by_impl["accelerate"]), 3),
            }
        )
    return rows


def summarize_costs(costs: dict) -> list[dict]:
    return [
        {
            "case": name,
            **{f"{impl}_us": round(by_impl[impl] * 1e6, 2) for impl in IMPLEMENTATIONS},
            "ours-raw_us": round((by_impl["ours"] - by_impl["raw"]) * 1e6, 2),
        }
        for name, by_impl in costs.items()
    ]


def print_costs(rows: list[dict]) -> None:
    print(f"{'case':<28}{'raw µs':>10}{'ours µs':>10}{'accel µs':>10}{'ours-raw µs':>13}")
    for r in rows:
        print(
            f"{r['case']:<28}{r['raw_us']:>10.2f}{r['ours_us']:>10.2f}"
            f"{r['accelerate_us']:>10.2f}{r['ours-raw_us']:>13.2f}"
        )


def print_table(rows: list[dict]) -> None:
    header = f"{'case':<28}{'rounds':>7}{'raw µs':>10}{'ours µs':>10}{'accel µs':>10}"
    print(header + f"{'again/raw':>10}{'ours/raw':>10}{'ours/accel':>12}")
    for r in rows:
        print(
            f"{r['case']:<28}{r['rounds']:>7}{r['raw_us']:>10}{r['ours_us']:>10}"
            f"{r['accelerate_us']:>10}{r['again/raw']:>10.3f}{r['ours/raw']:>10.3f}"
            f"{r['ours/accelerate']:>12.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000, help="most rounds per case")
    parser.add_argument("--budget", type=float, default=8.0, help="seconds per case, about")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)

    from notebook_launcher import notebook_launcher
    from notebook_launcher.backends import shared_memory

    # First our collectives over gloo, as the others send theirs (the targets, and the
    # wrappers' own cost), then the same calls with ours through shared memory, as they run
    # by default in a job whose ranks share this machine.
    tables = {}
    for transport, switch in (("gloo", "0"), ("shared_memory", "1")):
        os.environ[shared_memory.ENV_SWITCH] = switch
        result = notebook_launcher(
            run_in_worker,
            args=(args.rounds, args.budget, transport == "gloo"),
            num_processes=2,
            output="main",
        )
        tables[transport] = summarize(result.main["timings"])  # rank 0's clock
        if transport == "gloo":
            tables["wrapper_cost"] = summarize_costs(result.main["costs"])
    print("2 gloo ranks, median per call; ours over gloo too")
    print_table(tables["gloo"])
    print("\nthe wrappers' own cost: transport replaced by local copies, best per call")
    print_costs(tables["wrapper_cost"])
    print("\nthe same, with ours through shared memory (raw and accelerate over gloo)")
    print_table(tables["shared_memory"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(tables, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
