"""GPU memory as the launching process sees it: the status table's memory column (each rank's
allocated CUDA memory) and ``get_max_memory`` (through NVML, CUDA left uninitialised)."""

from __future__ import annotations

import time

import torch
from gpu_support import GPUS, NEEDS_GPU

from notebook_launcher import get_max_memory, log, notebook_launcher
from notebook_launcher.ui.render import memory, status_html
from notebook_launcher.utils.nvml import gpu_info

pytestmark = NEEDS_GPU
MIB = 2**20


HELD = []  # kept to the worker's end, so the last report (sent after the return) still has it


def log_while_holding(mib):
    HELD.append(torch.zeros(mib * MIB, dtype=torch.uint8, device="cuda"))
    for step in range(4):
        log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.2)  # the worker's sender runs every 0.1 s
    return torch.cuda.memory_allocated()


def test_the_memory_column_shows_each_ranks_cuda_memory():
    result = notebook_launcher(log_while_holding, args=(300,), num_processes=1, ui="none")
    model = result.panel.model
    shown = model.ranks[0].memory
    assert shown is not None and shown == result.main >= 300 * MIB
    table = status_html(model, time.monotonic())
    assert "<th" in table and ">memory</th>" in table
    assert memory(shown) in table  # e.g. "300 MiB"


def test_get_max_memory_reads_every_gpu_through_nvml_without_initialising_cuda():
    measured = get_max_memory()
    assert list(measured)[:GPUS] == list(range(GPUS))
    for index in range(GPUS):
        info = gpu_info(index)
        assert info is not None and 0 < info.free_bytes <= info.total_bytes
        assert 0 < measured[index] <= info.total_bytes
        assert (
            abs(measured[index] - info.free_bytes) < 1024 * MIB
        )  # the same reading, a moment later
    assert measured.get("cpu", 1) > 0
    assert not torch.cuda.is_initialized()  # asking from the kernel leaves fork launches possible
    # The launch that follows works (the folder's fixture checks CUDA again after the test).
    assert notebook_launcher(torch.cuda.device_count, num_processes=1, ui="none").main == GPUS


def measured_in_a_worker():
    torch.zeros(1, device="cuda")  # CUDA initialised: get_max_memory asks torch now
    return {
        "measured": {str(k): v for k, v in get_max_memory().items()},
        "total": torch.cuda.get_device_properties(0).total_memory,
        "free": torch.cuda.mem_get_info(0)[0],
    }


def test_get_max_memory_in_a_worker_asks_torch_and_agrees_with_nvml():
    out = notebook_launcher(measured_in_a_worker, num_processes=1, ui="none").main
    measured = out["measured"]
    assert "0" in measured
    assert 0 < measured["0"] <= out["total"]
    assert abs(measured["0"] - out["free"]) < 256 * MIB
    nvml = gpu_info(0)
    assert nvml is not None and nvml.total_bytes >= out["total"] - 1024 * MIB
