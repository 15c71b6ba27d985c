"""End-to-end training throughput of a tiny MLP: notebook_launcher's Accelerator against peers.

* ``ours``        ``notebook_launcher.notebook_launcher`` + ``notebook_launcher.Accelerator``
* ``ours_gloo``   the same with ``NOTEBOOK_LAUNCHER_SHARED_MEMORY=0``: DDP's gradients over gloo,
                  as the peers send them, instead of through shared memory (not a peer: it
                  shows what the shared-memory all-reduce brings)
* ``accelerate``  ``accelerate.notebook_launcher`` + ``accelerate.Accelerator(cpu=True)``
* ``fabric``      Lightning Fabric, ``strategy="ddp_fork"`` (skipped when not installed)

Each launch trains the same MLP (32 -> 256 -> 256 -> 10, SGD) on the same 20,480 random samples,
batch 64 per process, for ``--epochs`` epochs; rank 0 times the training loop after a warm-up of
``WARMUP`` steps, so the figure is samples per second of steady training, launch excluded. The
framework and process counts are interleaved round by round, each launch from a fresh
interpreter; the table gives the median.

    python benchmarks/train_bench.py [--rounds 5] [--epochs 2] [--sizes 1,2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

SAMPLES = 20_480
BATCH = 64
WARMUP = 20


def _setup():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 32, generator=g)
    y = torch.randint(0, 10, (SAMPLES,), generator=g)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    return model, optimizer, loader


def _loop(epochs, loader, model, optimizer, backward, world):
    import torch

    loss_fn = torch.nn.functional.cross_entropy
    seen, start = 0, None
    for _ in range(epochs):
        for step, (x, y) in enumerate(loader):
            if start is None and step == WARMUP:
                start = time.perf_counter()
            optimizer.zero_grad()
            backward(loss_fn(model(x), y))
            optimizer.step()
            if start is not None:
                seen += x.shape[0] * world
    return seen / (time.perf_counter() - start)


def train_ours(epochs):
    from notebook_launcher import Accelerator

    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(*_setup())
    return _loop(epochs, loader, model, optimizer, accelerator.backward, accelerator.num_processes)


def train_accelerate(epochs):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model, optimizer, loader = accelerator.prepare(*_setup())
    return _loop(epochs, loader, model, optimizer, accelerator.backward, accelerator.num_processes)


def train_fabric(fabric, epochs):
    model, optimizer, loader = _setup()
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(loader)
    return _loop(epochs, loader, model, optimizer, fabric.backward, fabric.world_size)


def run(framework, n, epochs):
    if framework in ("ours", "ours_gloo"):
        from notebook_launcher import notebook_launcher

        return notebook_launcher(train_ours, args=(epochs,), num_processes=n, ui="none")[0]
    if framework == "accelerate":
        import io
        from contextlib import redirect_stdout

        from accelerate import notebook_launcher

        box = {}

        def fn(epochs):  # accelerate's launcher returns nothing: rank 0 writes a file
            rate = train_accelerate(epochs)
            from accelerate import PartialState

            if PartialState().is_main_process:
                with open(box["path"], "w") as f:
                    f.write(str(rate))

        import tempfile

        with tempfile.NamedTemporaryFile("r", suffix=".txt") as f:
            box["path"] = f.name
            with redirect_stdout(io.StringIO()):
                notebook_launcher(fn, args=(epochs,), num_processes=n, use_port=str(_port()))
            return float(open(f.name).read())
    import lightning

    fabric = lightning.Fabric(
        accelerator="cpu", devices=n, strategy="ddp_fork" if n > 1 else "auto"
    )
    return fabric.launch(train_fabric, epochs)


def _port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--sizes", default="1,2")
    parser.add_argument("--json")
    args = parser.parse_args()
    frameworks = ["ours", "ours_gloo", "accelerate"]
    try:
        import lightning  # noqa: F401

        frameworks.append("fabric")
    except ImportError:
        print("lightning is not installed: Fabric is left out (pip install lightning)")
    sizes = [int(s) for s in args.sizes.split(",")]
    rates = {(f, n): [] for f in frameworks for n in sizes}
    for _ in range(args.rounds):
        for n in sizes:
            for framework in frameworks:
                # A fresh interpreter per launch: Accelerate runs N=1 in the calling process
                # and then refuses N=2 there, and Fabric's fork strategy runs once per process.
                rates[(framework, n)].append(_in_subprocess(framework, n, args.epochs))
    print(f"\ntraining throughput, samples/s (median of {args.rounds}; batch {BATCH}/process)")
    print(f"{'N':>3} " + "".join(f"{f:>12}" for f in frameworks) + "   ours/best peer")
    table = {}
    for n in sizes:
        medians = {f: statistics.median(rates[(f, n)]) for f in frameworks}
        best = max(v for f, v in medians.items() if not f.startswith("ours"))
        table[n] = {
            "medians": medians,
            "ratio": medians["ours"] / best,
            "runs": {f: rates[(f, n)] for f in frameworks},
        }
        cells = "".join(f"{medians[f]:>12,.0f}" for f in frameworks)
        print(f"{n:>3} {cells}   {medians['ours'] / best:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in table.items()}, f, indent=1)


def _in_subprocess(framework, n, epochs):
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import train_bench as t; "
        f"r = t.run({framework!r}, {n}, {epochs}); print('RATE', r)"
    )
    env = dict(os.environ)
    if framework == "ours_gloo":
        env["NOTEBOOK_LAUNCHER_SHARED_MEMORY"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    for line in out.stdout.splitlines():
        if line.startswith("RATE"):
            return float(line.split()[1])
    raise RuntimeError(f"{framework} with {n} processes failed:\n{out.stderr[-2000:]}")


if __name__ == "__main__":
    import tempfile

    # Accelerate's launcher (torch elastic) leaves a torchelastic_* folder per launch in TMPDIR.
    with tempfile.TemporaryDirectory(prefix="train_bench_") as scratch:
        os.environ["TMPDIR"] = scratch
        main()
