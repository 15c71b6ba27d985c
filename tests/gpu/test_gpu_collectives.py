"""Every collective on CUDA tensors, through a real launch of 1 process and (with 2 GPUs) of 2;
the shared-memory transport (CPU jobs' exchange, large results) stays out of CUDA's way."""

from __future__ import annotations

import os

import pytest
import torch
from gpu_support import GPUS, NEEDS_GPU, make_loader, make_model, needs_two_gpus

from notebook_launcher import (
    Accelerator,
    PartialState,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    notebook_launcher,
    pad_across_processes,
    reduce,
)
from notebook_launcher.protocol import shared_files

pytestmark = NEEDS_GPU
PROCESSES = [1, pytest.param(2, marks=needs_two_gpus)]


def every_collective():
    state = PartialState()
    rank, world, device = state.process_index, state.num_processes, state.device
    t = torch.arange(3, device=device, dtype=torch.float32) + 10 * rank
    gathered = gather(t)
    nested = gather({"a": t, "ids": [t.long()], "scalar": torch.tensor(rank, device=device)})
    summed = reduce(t, "sum")
    mean = reduce(t, "mean")
    most = reduce(t, "max")
    half = reduce(torch.full((4,), 0.5, device=device, dtype=torch.float16), "sum")
    brain = gather(torch.full((2,), rank, device=device, dtype=torch.bfloat16))
    sent = broadcast(t.clone(), from_process=world - 1)
    padded = pad_across_processes(torch.ones(rank + 1, 2, device=device), pad_index=-1)
    first = pad_across_processes(torch.ones(rank + 1, device=device), pad_first=True)
    objects = gather_object({"rank": rank})
    listed = gather_object([f"item of {rank}"])
    shared = broadcast_object_list([f"from {rank}", rank], from_process=0)
    state.wait_for_everyone()
    return {
        "world": world,
        "device": str(device),
        "devices": sorted(
            {str(x.device) for x in (gathered, summed, mean, most, half, brain, sent, padded)}
        ),
        "gather": gathered.tolist(),
        "nested": (nested["a"].tolist(), nested["ids"][0].dtype, nested["scalar"].tolist()),
        "sum": summed.tolist(),
        "mean": mean.tolist(),
        "max": most.tolist(),
        "half": (half.dtype, half.tolist()),
        "bf16": (brain.dtype, brain.float().tolist()),
        "broadcast": sent.tolist(),
        "padded": padded.tolist(),
        "pad_first": first.tolist(),
        "objects": objects,
        "listed": listed,
        "shared": shared,
    }


@pytest.mark.parametrize("processes", PROCESSES)
def test_every_collective_on_cuda_tensors(processes):
    result = notebook_launcher(every_collective, num_processes=processes, ui="none")
    w = processes
    rows = [[float(i + 10 * r) for i in range(3)] for r in range(w)]
    total = [sum(row[i] for row in rows) for i in range(3)]
    for rank, out in enumerate(result.values):
        assert out["world"] == w and out["device"] == f"cuda:{rank}"
        assert out["devices"] == [f"cuda:{rank}"]  # results stay on the GPU
        assert out["gather"] == [x for row in rows for x in row]
        assert out["nested"] == (
            [x for row in rows for x in row],
            torch.int64,
            list(range(w)),
        )
        assert out["sum"] == total
        assert out["mean"] == pytest.approx([x / w for x in total])
        assert out["max"] == rows[-1]
        assert out["half"] == (torch.float16, [0.5 * w] * 4)
        assert out["bf16"] == (torch.bfloat16, [float(r) for r in range(w) for _ in range(2)])
        assert out["broadcast"] == rows[-1]
        assert out["padded"] == [[1.0, 1.0]] * (rank + 1) + [[-1.0, -1.0]] * (w - rank - 1)
        assert out["pad_first"] == [0.0] * (w - rank - 1) + [1.0] * (rank + 1)
        assert out["objects"] == [{"rank": r} for r in range(w)]
        assert out["listed"] == [f"item of {r}" for r in range(w)]
        assert out["shared"] == ["from 0", 0]


def metrics_and_transport():
    from notebook_launcher.backends.comm import Communicator
    from notebook_launcher.backends.cpu import SharedMemoryCommunicator
    from notebook_launcher.ops.communicator import current

    accelerator = Accelerator()
    state = PartialState()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # 250 samples: the last batch is short, and gather_for_metrics drops what was duplicated.
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader(250))
    seen = 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        seen += accelerator.gather_for_metrics(y).shape[0]
    comm = current()
    # An exchange file is unlinked once every rank opened it, but stays mapped while in use.
    prefix = os.path.join(shared_files.SHARED_MEMORY_DIRECTORY, shared_files.SHARED_MEMORY_PREFIX)
    with open("/proc/self/maps", encoding="utf-8") as maps:
        exchanges = sorted({line.split(None, 5)[-1].strip() for line in maps if prefix in line})
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {
        "group": state.backend,
        "communicator": type(comm).__name__,
        "plain_communicator": type(comm) is Communicator
        and not isinstance(comm, SharedMemoryCommunicator),
        "ddp_hook": state._backend.register_ddp_hook(model, state)
        if state.use_distributed
        else None,
        "exchanges": exchanges,
        "seen": seen,
        "wrapped": type(model).__name__,
        "weights": gather(weights.unsqueeze(0)).cpu(),
    }


@pytest.mark.parametrize("processes", PROCESSES)
def test_cuda_jobs_use_nccl_and_no_shared_memory_exchange(processes):
    result = notebook_launcher(metrics_and_transport, num_processes=processes, ui="none")
    for out in result.values:
        assert out["group"] == "nccl"
        assert out["plain_communicator"], out["communicator"]
        assert out["ddp_hook"] in (None, False)  # DDP's own NCCL all-reduce carries the gradients
        assert out["exchanges"] == []  # no shared-memory exchange is mapped in this job
        assert out["seen"] == 250  # every sample counted once, across the ranks
        weights = out["weights"]
        assert weights.device.type == "cpu"
        assert all(torch.equal(weights[0], row) for row in weights)  # every rank the same
    expected = "DistributedDataParallel" if processes > 1 else "Sequential"
    assert result[0]["wrapped"] == expected


def cuda_results():
    device = PartialState().device
    large = torch.arange(8 * 2**20, device=device, dtype=torch.float32)  # 32 MiB
    return {
        "large": large,
        "view": large[: 2**20],
        "small": [torch.ones(3, device=device, dtype=torch.bfloat16)],
        "pair": (torch.tensor(7, device=device), "text"),
        "grad": torch.ones(2, device=device, requires_grad=True) * 2,
    }


def test_cuda_results_come_back_on_the_cpu_and_large_ones_through_shared_memory():
    before = set(shared_files.leftover_files(os.getpid()))
    out = notebook_launcher(cuda_results, num_processes=1, ui="none").main
    assert out["large"].device.type == "cpu" and out["large"].shape == (8 * 2**20,)
    assert torch.equal(
        out["large"][-3:], torch.tensor([8 * 2**20 - 3.0, 8 * 2**20 - 2.0, 8 * 2**20 - 1.0])
    )
    assert torch.equal(out["view"], out["large"][: 2**20])
    assert out["small"][0].device.type == "cpu" and out["small"][0].dtype == torch.bfloat16
    assert out["pair"][0].item() == 7 and out["pair"][1] == "text"
    assert out["grad"].device.type == "cpu" and not out["grad"].requires_grad
    assert set(shared_files.leftover_files(os.getpid())) == before  # mapped and unlinked at once
    # The kernel (this process) holds the values on the CPU only: CUDA is still untouched here,
    # which the folder's fixture checks after the test.


def ddp_steps():
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
    losses = []
    for _ in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
    unwrapped = accelerator.unwrap_model(model)
    return {
        "losses": losses,
        "weights": [p.detach().cpu() for p in unwrapped.parameters()],
        "device": str(next(unwrapped.parameters()).device),
    }


@needs_two_gpus
def test_two_gpus_train_one_ddp_model_over_nccl():
    result = notebook_launcher(ddp_steps, num_processes=2, ui="none")
    assert [out["device"] for out in result.values] == ["cuda:0", "cuda:1"]
    assert result[0]["losses"] == result[1]["losses"]
    assert result[0]["losses"][-1] < 0.5 * result[0]["losses"][0]
    for a, b in zip(result[0]["weights"], result[1]["weights"], strict=True):
        assert torch.equal(a, b)


def test_gpu_count_is_read_without_initialising_cuda():
    assert GPUS >= 1
    assert not torch.cuda.is_initialized()
