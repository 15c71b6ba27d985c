"""Iteration throughput of a prepared data loader against a plain DataLoader and Accelerate's.

For each scenario, one process's share of a dataset (process 0 of ``--processes``) is read in
three ways, over exactly the same samples in the same batches:

* ``plain``       ``torch.utils.data.DataLoader(dataset, batch_size, sampler=<that process's
                  indices>)``: the ordinary loader for exactly those samples (the floor), with
                  a ``SubsetRandomSampler`` of them where the original loader shuffles; for
                  the iterable dataset, a stream of that process's samples
* ``ours``        ``notebook_launcher.data.prepare_data_loader(loader, ...)``
* ``accelerate``  ``accelerate.data_loader.prepare_data_loader(loader, ...)``

The last scenario reads batches of one sample without collation, so that the loaders' own
cost per batch, which the other scenarios hide under the cost of loading, shows.

Each repeat times one epoch of each of the three, back to back (who goes first rotates); the
table shows the median epoch times and the throughput ratios ours/plain and ours/accelerate,
each the median over the repeats of the ratio within a repeat, which cancels most of the drift
of a busy machine (higher is better for us; targets >= 0.97 and >= 1.0). Every loader reads
in the benchmark's own process (``num_workers=0``, one torch thread), so by default the time is
this process's CPU time, which other programs running on the machine disturb far less than
wall-clock time (``--clock wall`` to use that instead).

    python benchmarks/data_bench.py [--repeats 31] [--samples 40000] [--batch-size 32]
                                    [--processes 2] [--clock cpu|wall] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    IterableDataset,
    SubsetRandomSampler,
    TensorDataset,
)

LOADERS = ("plain", "ours", "accelerate")


class Records(Dataset):
    """Samples that are dicts of an int, a tensor and a string (collated into a dict batch)."""

    def __init__(self, size: int) -> None:
        self.features = torch.randn(size, 16)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": self.features[index], "name": f"sample-{index}"}


class Stream(IterableDataset):
    """An iterable dataset of the given samples (sized, like many streaming readers)."""

    def __init__(self, samples: list[Any]) -> None:
        self.samples = samples

    def __iter__(self):
        return iter(self.samples)

    def __len__(self) -> int:
        return len(self.samples)


def _keep(samples: list[Any]) -> list[Any]:
    """No collation: the per-batch cost of the loaders themselves shows."""
    return samples


class MovedByHand:
    """A plain loader whose batches (lists of tensors) are moved in the loop, as users write it."""

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __iter__(self):
        device = self.device
        for batch in self.loader:
            yield [tensor.to(device) for tensor in batch]


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def _epoch(loader: Any, clock: Callable[[], float]) -> float:
    gc.collect()
    start = clock()
    count = 0
    for _ in loader:
        count += 1
    elapsed = clock() - start
    if count == 0:
        raise RuntimeError("a loader yielded no batch")
    return elapsed


def _epoch_ids(loader: Any) -> tuple[int, list[int]]:
    """How many batches an epoch has, and the sorted ids of the samples it reads.

    Every dataset here carries its sample ids: first in tuples, under "index" in dicts, or as
    the samples themselves.
    """
    count, ids = 0, []
    for batch in loader:
        count += 1
        if isinstance(batch, dict):
            batch = batch["index"]
        elif isinstance(batch, (list, tuple)) and isinstance(batch[0], torch.Tensor):
            batch = batch[0]
        ids.extend(batch.tolist() if isinstance(batch, torch.Tensor) else batch)
    return count, sorted(ids)


Build = Callable[[], tuple[dict[str, Any], bool]]


def scenarios(samples: int, batch_size: int, processes: int) -> dict[str, Build]:
    """Each scenario builds the three loaders over one process's share of the same data, and
    says whether they read exactly the same samples (a shuffling loader reads another share
    each epoch, so then only the sizes match)."""
    from accelerate.data_loader import prepare_data_loader as theirs

    from notebook_launcher.data import prepare_data_loader as ours

    share = {"num_processes": processes, "process_index": 0}

    def map_style(
        dataset: Any, size: int = batch_size, shuffle: bool = False, **options: Any
    ) -> Build:
        collate = {"collate_fn": _keep} if size == 1 else {}

        def build() -> tuple[dict[str, Any], bool]:
            original = DataLoader(dataset, batch_size=size, shuffle=shuffle, **collate)
            prepared = ours(original, **share, **options)
            # The ordinary loader for exactly this process's samples: its indices as sampler
            # (shuffled each epoch by a SubsetRandomSampler where the original shuffles).
            mine = [index for batch in prepared.batch_sampler for index in batch]
            sampler = SubsetRandomSampler(mine) if shuffle else mine
            plain: Any = DataLoader(dataset, batch_size=size, sampler=sampler, **collate)
            if options.get("put_on_device"):  # moved in the loop, as one writes it by hand
                plain = MovedByHand(plain, options["device"])
            accelerate = theirs(original, **share, **options)
            return {"plain": plain, "ours": prepared, "accelerate": accelerate}, not shuffle

        return build

    def iterable() -> tuple[dict[str, Any], bool]:
        stream = Stream(list(range(samples)))
        original = DataLoader(stream, batch_size=batch_size)
        prepared = ours(original, **share)
        plain = DataLoader(Stream(list(prepared.dataset)), batch_size=batch_size)
        return {"plain": plain, "ours": prepared, "accelerate": theirs(original, **share)}, True

    tensors = TensorDataset(torch.arange(samples), torch.randn(samples, 16))
    return {
        "tensors": map_style(tensors),
        "tensors, shuffled": map_style(tensors, shuffle=True),
        "tensors, on device": map_style(tensors, put_on_device=True, device=torch.device("cpu")),
        "dict samples": map_style(Records(samples)),
        "iterable": iterable,
        "overhead (size 1)": map_style(list(range(samples)), size=1),
    }


def measure(build: Build, repeats: int, clock: Callable[[], float]) -> dict[str, list[float]]:
    loaders, exact = build()
    count, ids = _epoch_ids(loaders["plain"])
    for name in ("ours", "accelerate"):
        other_count, other_ids = _epoch_ids(loaders[name])
        same = ids == other_ids if exact else len(ids) == len(other_ids)
        if count != other_count or not same:
            raise RuntimeError(f"{name} does not read the same samples as the plain loader")
    times: dict[str, list[float]] = {name: [] for name in LOADERS}
    for name in LOADERS:  # warm-up epoch each
        _epoch(loaders[name], clock)
    for repeat in range(repeats):
        order = LOADERS[repeat % 3 :] + LOADERS[: repeat % 3]  # rotate who goes first
        for name in order:
            times[name].append(_epoch(loaders[name], clock))
    return times


def _paired_ratio(theirs: list[float], ours: list[float]) -> float:
    """Median over the repeats of theirs/ours, each pair timed back to back (throughput ratio)."""
    return statistics.median(t / o for t, o in zip(theirs, ours, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--samples", type=int, default=40000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--json", help="also write the raw timings here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)

    report: dict[str, Any] = {"settings": vars(args), "scenarios": {}}
    header = f"{'scenario':<20}" + "".join(f"{n + ' ms':>14}" for n in LOADERS)
    print(
        f"process 0 of {args.processes}, batch size {args.batch_size}, {args.samples} samples, "
        f"median {args.clock} time of {args.repeats} epochs"
    )
    print(header + f"{'ours/plain':>12}{'ours/accel':>12}")
    for name, build in scenarios(args.samples, args.batch_size, args.processes).items():
        times = measure(build, args.repeats, CLOCKS[args.clock])
        median = {loader: statistics.median(values) for loader, values in times.items()}
        vs_plain = _paired_ratio(times["plain"], times["ours"])
        vs_accelerate = _paired_ratio(times["accelerate"], times["ours"])
        row = "".join(f"{median[n] * 1000:>14.2f}" for n in LOADERS)
        print(f"{name:<20}{row}{vs_plain:>12.3f}{vs_accelerate:>12.3f}")
        report["scenarios"][name] = {
            "median_s": median,
            "ours_vs_plain": vs_plain,
            "ours_vs_accelerate": vs_accelerate,
            "times_s": times,
        }
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
