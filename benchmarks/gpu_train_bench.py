"""Training throughput on one GPU (N = 1): notebook_launcher's Accelerator against peers.

* ``plain``       a plain PyTorch loop on ``cuda:0`` (autocast for bf16), the reference
* ``ours``        ``notebook_launcher.notebook_launcher(num_processes=1)`` + ``notebook_launcher.Accelerator``
* ``accelerate``  ``accelerate.Accelerator`` in the process itself, as Accelerate's launcher runs
                  one GPU (it calls the function in the notebook's own process)

Each contender trains the same MLP (1024 -> 4096 -> 4096 -> 1024 -> 10, AdamW) on the same
32,768 random CPU samples, batch 512, the batches copied to the GPU by the contender (the plain
loop with ``.to(device)``, the others by their prepared data loader). After ``WARMUP`` steps the
next ``--steps`` are timed, with ``torch.cuda.synchronize()`` at both ends: samples per second of
steady training. ``ours`` also gives the launch's wall time from the call to the result (fork,
CUDA and NCCL set-up included). Every run is a fresh interpreter; the contenders are
interleaved round by round and the table gives the best of ``--rounds`` (the fastest run is the
one least disturbed), each as a ratio to ``plain`` of the same precision.

    python benchmarks/gpu_train_bench.py [--rounds 2] [--steps 150] [--precisions no,bf16] [--json out.json]

On a machine without a CUDA GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SAMPLES = 32_768
BATCH = 512
WARMUP = 20
CONTENDERS = ("plain", "ours", "accelerate")


def _data():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 1024, generator=g)
    y = torch.randint(0, 10, (SAMPLES,), generator=g)
    return torch.utils.data.TensorDataset(x, y)


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.GELU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.GELU(),
        torch.nn.Linear(4096, 1024),
        torch.nn.GELU(),
        torch.nn.Linear(1024, 10),
    )


def _loader():
    import torch

    return torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True, drop_last=True)


def _timed(batches, step, steps: int) -> dict:
    """Run ``step(x, y)`` over ``batches`` (repeated as needed); time ``steps`` after WARMUP."""
    import torch

    done, start, last = 0, None, None
    while done < WARMUP + steps:
        for x, y in batches():
            if done == WARMUP:
                torch.cuda.synchronize()
                start = time.perf_counter()
            last = step(x, y)
            done += 1
            if done == WARMUP + steps:
                break
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"samples_per_s": steps * BATCH / seconds, "loss": float(last)}


def run_plain(precision: str, steps: int) -> dict:
    import torch

    device = torch.device("cuda", 0)
    model = _model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    loader = _loader()

    def step(x, y):
        x, y = x.to(device), y.to(device)
        if dtype is None:
            out = model(x)
        else:
            with torch.autocast("cuda", dtype=dtype):
                out = model(x)
        loss = torch.nn.functional.cross_entropy(out.float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    return _timed(lambda: loader, step, steps)


def _accelerated(accelerator, steps: int) -> dict:
    import torch

    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader())

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    return _timed(lambda: loader, step, steps)


def train_ours(precision: str, steps: int) -> dict:
    from notebook_launcher import Accelerator

    return _accelerated(Accelerator(mixed_precision=precision), steps)


def run_ours(precision: str, steps: int) -> dict:
    from notebook_launcher import notebook_launcher

    start = time.perf_counter()
    result = notebook_launcher(
        train_ours, args=(precision, steps), num_processes=1, ui="none", output="none"
    ).main
    result["launch_s"] = time.perf_counter() - start
    return result


def run_accelerate(precision: str, steps: int) -> dict:
    import accelerate

    return _accelerated(accelerate.Accelerator(mixed_precision=precision), steps)


RUNNERS = {"plain": run_plain, "ours": run_ours, "accelerate": run_accelerate}


def _one(contender: str, precision: str, steps: int, timeout: float) -> dict:
    """One measurement in a fresh interpreter (the launching one never initialises CUDA for ours)."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", contender, "--precisions", precision,
         "--steps", str(steps)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _gpu() -> tuple[int, str]:
    from notebook_launcher.utils.environment import cuda_device_count

    count = cuda_device_count()
    if count == 0:
        return 0, ""
    try:
        name = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip().splitlines()[0]  # fmt: skip
    except (OSError, IndexError, subprocess.SubprocessError):
        name = "a CUDA GPU"
    return count, name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--precisions", default="no,bf16")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--json", help="write the measurements and the summary here")
    parser.add_argument("--one", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:  # the working tree's package, installed or not
        sys.path.insert(1, root)

    if args.one:
        print(json.dumps(RUNNERS[args.one](args.precisions, args.steps)))
        return 0

    count, card = _gpu()
    if count == 0:
        print("gpu_train_bench: no CUDA GPU here: nothing was measured (it runs on a GPU machine).")
        return 0
    import torch

    precisions = args.precisions.split(",")
    contenders = args.contenders.split(",")
    print(f"gpu_train_bench: {card}, torch {torch.__version__}, N = 1, batch {BATCH}, "
          f"{args.steps} timed steps, best of {args.rounds} rounds")  # fmt: skip
    runs: list[dict] = []
    for round_index in range(args.rounds):
        for precision in precisions:
            for contender in contenders:
                out = _one(contender, precision, args.steps, args.timeout)
                runs.append(
                    {"round": round_index, "precision": precision, "name": contender, **out}
                )
                shown = (
                    f"{out['samples_per_s']:,.0f} samples/s" if "samples_per_s" in out
                    else f"FAILED: {out['error']}"
                )  # fmt: skip
                print(f"  round {round_index} {precision:>4} {contender:>10}: {shown}", flush=True)
                _write(args.json, card, runs, [])  # what was measured so far, if cut off

    summary, failed = [], False
    for precision in precisions:
        best = {}
        for contender in contenders:
            rates = [r["samples_per_s"] for r in runs
                     if r["name"] == contender and r["precision"] == precision
                     and "samples_per_s" in r]  # fmt: skip
            failed |= not rates
            if rates:
                best[contender] = max(rates)
        reference = best.get("plain")
        parts = []
        for contender in contenders:
            if contender not in best:
                parts.append(f"{contender} failed")
            elif reference:
                parts.append(f"{contender} {best[contender] / reference:.3f} x")
        launch = [r["launch_s"] for r in runs if r["name"] == "ours" and "launch_s" in r
                  and r["precision"] == precision]  # fmt: skip
        line = f"{precision}: " + ", ".join(parts) + " of plain"
        if reference:
            line += f" ({reference:,.0f} samples/s)"
        if launch:
            line += f"; ours' whole launch {min(launch):.1f} s"
        summary.append(line)
    print("\n".join(["summary (steady training, ratio to the plain loop; higher is faster):"]
                    + [f"  {line}" for line in summary]))  # fmt: skip
    _write(args.json, card, runs, summary)
    return 1 if failed else 0


def _write(path: str | None, card: str, runs: list[dict], summary: list[str]) -> None:
    if path:
        import torch

        with open(path, "w", encoding="utf-8") as f:
            json.dump(
                {"card": card, "torch": torch.__version__, "runs": runs, "summary": summary},
                f,
                indent=1,
            )


if __name__ == "__main__":
    sys.exit(main())
