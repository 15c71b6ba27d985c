"""Device backends: chosen once, asked without initialising any device runtime."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from notebook_launcher.backends import (
    BACKENDS,
    CpuBackend,
    CudaBackend,
    MpsBackend,
    XlaBackend,
    backend_for,
    detect_backend,
)
from notebook_launcher.state import DistributedType


def test_cpu_backend():
    cpu = CpuBackend()
    assert cpu.is_available()
    assert cpu.device_count() >= 1
    assert cpu.process_group_backend == "gloo"
    assert cpu.distributed_type is DistributedType.MULTI_CPU
    assert cpu.device_for(3) == torch.device("cpu")
    assert cpu.default_start_method == "fork"
    assert not cpu.accelerator


def test_cuda_backend_facts():
    cuda = CudaBackend()
    assert (cuda.process_group_backend, cuda.distributed_type) == (
        "nccl",
        DistributedType.MULTI_GPU,
    )
    assert cuda.is_available() == (cuda.device_count() > 0)
    assert cuda.default_start_method == "fork"


def test_mps_backend_is_single_process():
    mps = MpsBackend()
    assert mps.distributed_type is DistributedType.NO
    assert mps.default_start_method == "spawn"
    assert mps.device_count() == (1 if mps.is_available() else 0)
    assert mps.device_for(0) == torch.device("mps")


def test_xla_backend_without_torch_xla_says_what_is_missing():
    xla = XlaBackend()
    assert xla.distributed_type is DistributedType.XLA
    assert xla.creates_process_group is False  # collectives go through torch_xla itself
    assert xla.is_available() is False and xla.device_count() == 0  # no torch_xla here
    with pytest.raises(RuntimeError, match="XLA devices need torch_xla, which is not installed"):
        xla.device_for(0)


def test_backend_for_names_and_errors():
    assert {name: type(backend_for(name)) for name in BACKENDS} == BACKENDS
    with pytest.raises(ValueError, match="device='tpu' is not valid.*'cpu', 'cuda', 'mps', 'xla'"):
        backend_for("tpu")


def test_detect_backend_chooses_once():
    chosen = detect_backend()
    assert detect_backend() is chosen
    assert isinstance(detect_backend(cpu=True), CpuBackend)
    assert isinstance(chosen, CpuBackend)  # no GPU on this machine
    with pytest.raises(TypeError, match="cpu=1"):
        detect_backend(cpu=1)


@pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="this torch has no CUDA")
def test_detection_does_not_initialise_cuda():
    code = (
        "import torch; from notebook_launcher.backends import detect_backend; "
        "from notebook_launcher.utils.environment import is_bf16_available, is_cuda_available; "
        "from notebook_launcher.utils.memory import get_max_memory; "
        "detect_backend().device_count(); is_cuda_available(); is_bf16_available(); "
        "get_max_memory(); print(torch.cuda.is_initialized())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def _device_and_rank():
    from notebook_launcher import PartialState

    state = PartialState()
    return type(state._backend).__name__, state.process_index, str(state.device)


def test_a_new_device_is_one_backend_class_and_a_registry_line(monkeypatch):
    from notebook_launcher import PreflightError, notebook_launcher, plan_launch
    from notebook_launcher.backends import Finding

    class FakeBackend(CpuBackend):  # a "device" that runs on the CPU, to launch for real
        name = "fake"
        label = "fake devices"
        preference = 99
        accelerator = True
        precisions = ("no", "bf16")

        def device_count(self) -> int:
            return 2

        def kernel_hazard(self, start_method: str):
            if start_method == "spawn":
                return Finding("the fake runtime is up", "it cannot be shared", "use fork")
            return None

    monkeypatch.setitem(BACKENDS, "fake", FakeBackend)
    plan = plan_launch()  # the kernel picks it and its count, no other change
    assert (plan.device, plan.num_processes, plan.start_method) == ("fake", 2, "fork")
    with pytest.raises(ValueError, match="fake devices support 'no' and 'bf16'"):
        plan_launch(mixed_precision="fp16")
    with pytest.raises(PreflightError, match="the fake runtime is up"):
        notebook_launcher(_device_and_rank, start_method="spawn", ui="none")
    result = notebook_launcher(_device_and_rank, ui="none")  # forked workers inherit the registry
    assert result.values == [("FakeBackend", 0, "cpu"), ("FakeBackend", 1, "cpu")]
