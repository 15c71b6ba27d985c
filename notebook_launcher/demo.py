"""A real launch on CPU processes: ``python -m notebook_launcher.demo [num_processes]``.

Each rank fits a small linear model on its own shard of synthetic data; gradients are averaged
across ranks with an all_reduce (plain data parallelism), and every rank's result comes back.
"""

from __future__ import annotations

import sys

import torch

from notebook_launcher import PartialState, notebook_launcher


def train(steps: int = 60, lr: float = 0.1) -> dict:
    import torch.distributed as dist

    state = PartialState()
    torch.manual_seed(0)
    true_w = torch.tensor([2.0, -3.0, 0.5])
    x = torch.randn(512, 3)
    y = x @ true_w + 0.01 * torch.randn(512)
    shard = slice(state.process_index, None, state.num_processes)  # this rank's share
    x, y = x[shard], y[shard]
    w = torch.zeros(3, requires_grad=True)
    for step in range(steps):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        if state.use_distributed:
            dist.all_reduce(w.grad)
            w.grad /= state.num_processes
        with torch.no_grad():
            w -= lr * w.grad
            w.grad.zero_()
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {loss.item():.5f}  ({len(x)} samples here)")
    return {"rank": state.process_index, "samples": len(x), "loss": loss.item(), "w": w.detach()}


def main(argv: list[str]) -> int:
    num_processes = int(argv[0]) if argv else 2
    print(f"Launching {num_processes} CPU processes...")
    result = notebook_launcher(train, num_processes=num_processes)
    print(f"\nResults gathered from {len(result)} ranks in {result.duration:.2f} s:")
    for value in result:
        w = ", ".join(f"{v:+.3f}" for v in value["w"].tolist())
        print(
            f"  rank {value['rank']}: {value['samples']} samples, final loss {value['loss']:.5f}, w = [{w}]"
        )
    same = all(torch.equal(v["w"], result.main["w"]) for v in result)
    print(f"All ranks hold the same weights: {same} (target w = [+2.000, -3.000, +0.500])")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
