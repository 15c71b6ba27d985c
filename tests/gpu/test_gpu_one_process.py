"""One process, one GPU: still a supervised worker process, never the launching process itself.

Accelerate's launcher calls the function in the notebook's own process when it trains on one GPU
(or one process): CUDA then lives in the kernel, the GPU memory the function used stays held
until the kernel restarts, a later multi-GPU launch from that kernel is refused, and the
function's return value is dropped. Ours starts one worker process in that case too: the kernel
never initialises CUDA, the memory is released when the worker ends, and the value comes back.
"""

from __future__ import annotations

import os

import pytest
import torch
from gpu_support import GPUS

from notebook_launcher import notebook_launcher, plan_launch
from notebook_launcher.backends import CudaBackend
from notebook_launcher.utils.nvml import gpu_info

TOUCHED = []  # changed by the launched function: in the worker's copy only


def identity():
    TOUCHED.append(os.getpid())
    return {"pid": os.getpid(), "parent": os.getppid(), "touched": list(TOUCHED)}


def test_one_process_runs_in_a_worker_not_in_the_launching_process():
    out = notebook_launcher(identity, num_processes=1, ui="none").main
    assert out["pid"] != os.getpid() and out["parent"] == os.getpid()
    assert out["touched"] == [out["pid"]]
    assert TOUCHED == []  # the launching process's state is not the worker's


class OneGpu(CudaBackend):
    """This machine seen as a one-GPU machine, for planning only (nothing is started)."""

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1


def test_a_one_gpu_machine_plans_one_forked_worker_by_default():
    plan = plan_launch(backend=OneGpu(), ui="none")  # num_processes=None
    assert (plan.num_processes, plan.device, plan.start_method) == (1, "cuda", "fork")
    assert plan.world_size == 1


def hold_memory(gib):
    block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    return {
        "pid": os.getpid(),
        "allocated": torch.cuda.memory_allocated(),
        "first": block[:4].clone(),  # a CUDA tensor: comes back on the CPU
    }


@pytest.mark.gpu
@pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU")
def test_one_gpu_launch_keeps_cuda_out_of_the_kernel_and_frees_the_memory():
    free_before = gpu_info(0).free_bytes
    for _ in range(2):  # and so a second launch from the same kernel works too
        out = notebook_launcher(hold_memory, args=(2,), num_processes=1, ui="none").main
        assert out["pid"] != os.getpid()
        assert out["allocated"] >= 2 * 2**30
        assert out["first"].device.type == "cpu" and out["first"].tolist() == [1, 1, 1, 1]
    assert not torch.cuda.is_initialized()  # the launching process never touched CUDA
    # The worker's CUDA context and its 2 GiB went with it.
    assert gpu_info(0).free_bytes > free_before - 512 * 2**20
