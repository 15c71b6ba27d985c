"""Kernel memory when ranks return large tensors, measured inside a real Jupyter kernel.

Every rank returns one float32 tensor of ``--mb`` MB; the kernel keeps the values. For each way of
bringing them back, a fresh ipykernel runs the launch in one cell while this script reads the
kernel's ``/proc/<pid>/status``: its peak resident memory (``VmHWM``, reset just before the cell
through ``/proc/<pid>/clear_refs``) and its resident memory once the cell ended, both above the
kernel's resident memory before the cell, and as a multiple of the total returned size:

* ``ours``         ``notebook_launcher`` (default settings) returning the tensors
* ``pipe``         bare ``torch.multiprocessing`` fork, each rank sending ``pickle.dumps(tensor)``
                   over a pipe, the kernel unpickling: the plain transport a hand-written launcher
                   (and notebook_launcher before shared-memory results) uses
* ``torch_queue``  bare ``torch.multiprocessing`` fork with a ``SimpleQueue``: torch shares each
                   storage through shared memory (the way Lightning's notebook launcher returns
                   rank 0's value)

The last column, ``freed``, is what stays above the baseline after ``del`` of the values and a
garbage collection (memory the kernel would keep for nothing).

    python benchmarks/result_memory_bench.py [--mb 500] [--processes 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json

from kernel_bench import Kernel

LANES = ("ours", "pipe", "torch_queue")


def make_result(rank: int, megabytes: int):
    import torch

    return torch.full((megabytes * (1 << 20) // 4,), float(rank), dtype=torch.float32)


def _ours(n: int, megabytes: int) -> list:
    from notebook_launcher import PartialState, notebook_launcher

    def job(mb):
        return make_result(PartialState().process_index, mb)

    return list(notebook_launcher(job, args=(megabytes,), num_processes=n))


def _pipe_worker(rank: int, megabytes: int, conns) -> None:
    import pickle

    conns[rank].send_bytes(pickle.dumps(make_result(rank, megabytes), pickle.HIGHEST_PROTOCOL))


def _pipe(n: int, megabytes: int) -> list:
    import multiprocessing
    import pickle

    import torch.multiprocessing as mp

    pipes = [multiprocessing.Pipe(duplex=False) for _ in range(n)]
    context = mp.start_processes(
        _pipe_worker,
        args=(megabytes, [w for _, w in pipes]),
        nprocs=n,
        join=False,
        start_method="fork",
    )
    values = [pickle.loads(r.recv_bytes()) for r, _ in pipes]
    while not context.join(timeout=60):
        pass
    return values


def _queue_worker(rank: int, megabytes: int, queue, received) -> None:
    queue.put((rank, make_result(rank, megabytes)))
    received.wait(60)  # the kernel fetches the shared storage from this process


def _torch_queue(n: int, megabytes: int) -> list:
    import torch.multiprocessing as mp

    ctx = mp.get_context("fork")
    queue, received = ctx.SimpleQueue(), ctx.Event()
    context = mp.start_processes(
        _queue_worker,
        args=(megabytes, queue, received),
        nprocs=n,
        join=False,
        start_method="fork",
    )
    values = dict(queue.get() for _ in range(n))
    received.set()
    while not context.join(timeout=60):
        pass
    return [values[r] for r in range(n)]


LAUNCH = {"ours": _ours, "pipe": _pipe, "torch_queue": _torch_queue}

_SETUP = {
    "ours": "import notebook_launcher, torch, result_memory_bench as _rm",
    "pipe": "import torch, torch.multiprocessing, result_memory_bench as _rm",
    "torch_queue": "import torch, torch.multiprocessing, result_memory_bench as _rm",
}


def _status(pid: int) -> dict[str, int]:
    """The kernel's memory figures from /proc, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def measure(lane: str, n: int, megabytes: int) -> dict[str, float]:
    kernel = Kernel()
    try:
        pid = kernel.km.provisioner.process.pid
        kernel.run(_SETUP[lane])
        kernel.run("import gc; gc.collect()")
        before = _status(pid)["VmRSS"]
        with open(f"/proc/{pid}/clear_refs", "w") as file:
            file.write("5")  # resets VmHWM to the current resident size
        kernel.run(
            f"_values = _rm.LAUNCH[{lane!r}]({n}, {megabytes}); "
            # Reading every value maps all of its memory in (and checks it).
            f"assert all(bool(v.eq(r).all()) for r, v in enumerate(_values))",
            timeout=600,
        )
        after = _status(pid)
        kernel.run("del _values; gc.collect()")
        freed = _status(pid)["VmRSS"]
    finally:
        kernel.close()
    total = n * megabytes * (1 << 20)
    return {
        "peak": (after["VmHWM"] - before) / total,
        "kept": (after["VmRSS"] - before) / total,
        "freed": (freed - before) / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=500, help="megabytes each rank returns")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--lanes", default=",".join(LANES))
    parser.add_argument("--json", help="write every sample here")
    options = parser.parse_args()
    lanes = options.lanes.split(",")
    samples = {lane: [] for lane in lanes}
    for _ in range(options.repeats):
        for lane in lanes:  # interleaved
            samples[lane].append(measure(lane, options.processes, options.mb))
    total = options.processes * options.mb
    print(
        f"{options.processes} ranks x {options.mb} MB = {total} MB returned; "
        "kernel resident memory above its size before the launch, as a multiple of that total"
    )
    print(f"{'lane':<12} {'peak':>6} {'kept':>6} {'freed':>6}   (worst of {options.repeats})")
    for lane in lanes:
        worst = {k: max(s[k] for s in samples[lane]) for k in ("peak", "kept", "freed")}
        print(f"{lane:<12} {worst['peak']:6.2f} {worst['kept']:6.2f} {worst['freed']:6.2f}")
    if options.json:
        with open(options.json, "w") as file:
            json.dump({"options": vars(options), "samples": samples}, file, indent=1)


if __name__ == "__main__":
    main()
