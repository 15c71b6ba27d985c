"""Soak of the shared-memory collectives against gloo: many random collectives, every result compared.

The workload is the differential test's (``tests/ops/collective_workload.py``): ``reduce`` (sum
and mean), ``gather``, ``broadcast``, ``gather_object`` and ``broadcast_object_list`` of tensors
and nested dicts of every dtype gloo reduces, random shapes (empty ones included), random values
(signed zeros, subnormals, huge values, infinities, NaN included). It runs in batches; each
batch is launched twice with the same seed, through shared memory and with
``NOTEBOOK_LAUNCHER_SHARED_MEMORY=0`` (gloo), and every tensor of every result is checked:

* against gloo's, bit for bit (any NaN equal to any NaN);
* every rank's results against rank 0's (hashes);
* against the exact result (gathers and broadcasts of tensors and objects, integer and bool sums
  and means, empty tensors), or, for floating-point sums and means of finite values, against
  the float64 sum within ``(world - 1) * u * sum(|x|)`` (see ``collective_workload.sum_bound``).

The exchange's slots change from batch to batch (256 bytes, 1 KiB, the default), so tensors go
in one chunk or in thousands; the first batch of each world size starts with sums at the edges of
gloo's ring regions. Every difference is printed; the exit status is 1 if there was any.

    python benchmarks/shm_soak.py [--ranks 2 3] [--count 100000] [--seed 1] [--batch 5000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ops"))

LARGE = 0.01  # share of tensors of thousands of elements or more


def soak(world: int, count: int, seed: int, batch: int) -> int:
    """Run ``count`` collectives on ``world`` ranks, batch by batch; the differences found."""
    from collective_workload import SLOT_BYTES, Report, compare, run

    from notebook_launcher import notebook_launcher
    from notebook_launcher.backends import shared_memory

    total = Report()
    steps = 0
    started = time.monotonic()
    for index, begin in enumerate(range(0, count, batch)):
        n = min(batch, count - begin)
        batch_seed = seed * 1_000_003 + world * 10_007 + index
        slot = SLOT_BYTES[index % len(SLOT_BYTES)]
        edges = index == 0
        args = (batch_seed, n, slot, LARGE, edges)
        launches = []
        for switch in ("1", "0"):
            os.environ[shared_memory.ENV_SWITCH] = switch
            launches.append(
                list(
                    notebook_launcher(run, args=args, num_processes=world, output="none", ui="none")
                )
            )
        del os.environ[shared_memory.ENV_SWITCH]
        shared, gloo = launches
        report = compare(batch_seed, n, world, shared, gloo, LARGE, edges)
        total.add(report)
        steps += shared[0]["steps"]
        print(
            f"{world} ranks, batch {index}: {report.calls} collectives, {report.tensors} tensors "
            f"({report.exact} exact, {report.bounded} bounded), slot {shared[0]['slot_bytes']} B, "
            f"{len(report.differences)} differences  [{time.monotonic() - started:.0f} s]",
            flush=True,
        )
        for line in report.differences:
            print("   ", line, flush=True)
    print(
        f"{world} ranks: {total.calls} collectives ({steps} shared-memory steps), "
        f"{total.tensors} tensors compared with gloo ({total.exact} also with the exact result, "
        f"{total.bounded} within the bound of the float64 sum): "
        f"{len(total.differences)} differences",
        flush=True,
    )
    return len(total.differences)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--count", type=int, default=100_000, help="collectives per rank count")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=5_000, help="collectives per launch")
    options = parser.parse_args()
    differences = sum(
        soak(world, options.count, options.seed, options.batch) for world in options.ranks
    )
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
