"""Bad input and a kernel in a bad state are refused before any worker starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from notebook_launcher import PartialState, PreflightError, plan_launch
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.backends import CudaBackend
from notebook_launcher.utils.environment import cuda_device_count

HAS_GPU = cuda_device_count() > 0


def ranks():
    return int(os.environ["RANK"])


def three():
    return 3


@pytest.mark.skipif(HAS_GPU, reason="num_processes defaults to the GPU count where GPUs exist")
def test_num_processes_none_without_gpu():
    with pytest.raises(ValueError) as info:
        launch(ranks)

    message = str(info.value)
    assert "num_processes=None" in message
    assert "no GPU" in message
    assert "num_processes=2" in message  # says what to write


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_bad_num_processes(value):
    with pytest.raises(ValueError) as info:
        launch(ranks, num_processes=value)

    assert f"num_processes={value!r}" in str(info.value)
    assert "int >= 1" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"mixed_precision": "fp12"}, ["mixed_precision='fp12'", "'bf16'"]),
        ({"node_rank": 1}, ["node_rank=1", "num_nodes=1"]),
        ({"node_rank": 2, "num_nodes": 2}, ["node_rank=2", "num_nodes=2"]),
        ({"start_method": "forkserver"}, ["start_method='forkserver'", "'fork'", "'spawn'"]),
        ({"output": "rank0"}, ["output='rank0'", "'all'", "'main'", "'none'"]),
        ({"max_restarts": -1}, ["max_restarts=-1", ">= 0"]),
        ({"stall_timeout": 0}, ["stall_timeout=0", "> 0"]),
        ({"stall_timeout": -1}, ["stall_timeout=-1", "> 0"]),
        ({"timeout": 0}, ["timeout=0", "> 0"]),
        ({"threads_per_process": 0}, ["threads_per_process=0", ">= 1"]),
        ({"use_port": "http"}, ["use_port='http'", "65535"]),
        ({"log_line_prefix_template": "{gpu} "}, ["log_line_prefix_template='{gpu} '", "{rank}"]),
    ],
)
def test_bad_values_name_the_parameter_and_the_value(kwargs, expected):
    with pytest.raises(ValueError) as info:
        launch(ranks, num_processes=2, **kwargs)

    for text in expected:
        assert text in str(info.value)


def test_function_called_instead_of_passed():
    with pytest.raises(TypeError) as info:
        launch(three(), num_processes=2)

    message = str(info.value)
    assert "function=3" in message
    assert "expected a callable" in message
    assert "called instead of passed" in message


@pytest.mark.parametrize("args", [5, "abc", {"lr": 0.1}])
def test_args_must_be_a_tuple(args):
    with pytest.raises(TypeError) as info:
        launch(ranks, args=args, num_processes=2)

    assert f"args={args!r}" in str(info.value)
    assert "tuple" in str(info.value)


def test_args_as_list_are_accepted():
    def add(a, b):
        return a + b + int(os.environ["RANK"])

    assert launch(add, args=[1, 2], num_processes=2).values == [3, 4]


def test_process_group_in_the_calling_process_is_refused(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with pytest.raises(PreflightError) as info:
            launch(ranks, num_processes=2)
    finally:
        dist.destroy_process_group()

    message = str(info.value)
    assert "process group already exists" in message
    assert "How to fix it:" in message
    assert "destroy_process_group()" in message
    assert launch(ranks, num_processes=2).values == [0, 1]  # fine once it is gone


def state_seen_by_worker():
    state = PartialState()
    return state.num_processes, state.process_index, state.use_distributed


def test_partial_state_of_the_caller_does_not_leak_into_workers():
    PartialState._reset_state()
    caller = PartialState()  # created in the calling process before launching
    try:
        assert caller.num_processes == 1
        result = launch(state_seen_by_worker, num_processes=2)
        assert result.values == [(2, 0, True), (2, 1, True)]
        assert caller.num_processes == 1  # and the caller's state is left as it was
        assert caller.process_index == 0
        assert not dist.is_initialized()
    finally:
        PartialState._reset_state()


def test_cuda_initialised_check_refuses_fork(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    with pytest.raises(PreflightError) as info:
        launch(ranks, num_processes=2)

    message = str(info.value)
    assert "CUDA has already been initialised" in message
    assert "start_method='spawn'" in message
    assert "restart the kernel" in message


def test_cuda_initialised_check_allows_spawn(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    common = dict(num_processes=2, stall_timeout=None)  # the other settings: the defaults
    fork_plan = plan_launch(start_method="fork", **common)
    spawn_plan = plan_launch(start_method="spawn", **common)

    cuda = CudaBackend()  # its check applies to every launch, whatever the device
    assert cuda.kernel_hazard(fork_plan.start_method) is not None
    assert cuda.kernel_hazard(spawn_plan.start_method) is None


CUDA_IN_KERNEL = textwrap.dedent(
    """
    import torch
    from notebook_launcher import PreflightError, notebook_launcher

    def ranks():
        return 0

    if __name__ == "__main__":
        torch.zeros(1, device="cuda")  # what an earlier notebook cell might have done
        try:
            notebook_launcher(ranks, num_processes=1)
        except PreflightError as error:
            print("PREFLIGHT", str(error).replace("\\n", " "))
    """
)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_cuda_initialised_in_kernel_is_refused_on_a_gpu(tmp_path):
    # In a fresh interpreter, so this test process never holds a CUDA context.
    script = tmp_path / "cuda_in_kernel.py"
    script.write_text(CUDA_IN_KERNEL)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )

    assert "PREFLIGHT" in done.stdout, done.stdout + done.stderr
    assert "CUDA has already been initialised" in done.stdout
    assert "start_method='spawn'" in done.stdout


def test_every_default_comes_from_the_settings_record():
    import dataclasses
    import inspect

    from notebook_launcher import LaunchPanel, LaunchSettings

    defaults = {
        name: param.default
        for name, param in inspect.signature(launch).parameters.items()
        if name not in ("function", "args")
    }
    assert set(defaults) == {field.name for field in dataclasses.fields(LaunchSettings)}
    assert LaunchSettings(**defaults) == LaunchSettings()  # "29500" and 29500 are one port
    panel = inspect.signature(LaunchPanel).parameters
    for name in ("mixed_precision", "start_method", "timeout", "stall_timeout", "output"):
        assert panel[name].default == getattr(LaunchSettings(), name), name


def test_plan_launch_takes_a_record_or_keywords_and_starts_nothing():
    from notebook_launcher import LaunchSettings

    settings = LaunchSettings(num_processes=2, mixed_precision="bf16", stall_timeout=None)
    for plan in (plan_launch(settings), plan_launch(**vars(settings))):
        assert (plan.world_size, plan.device, plan.start_method) == (2, "cpu", "fork")
        assert (plan.mixed_precision, plan.stall_timeout) == ("bf16", None)
        assert not hasattr(plan, "ui")  # the view is chosen from the settings, not planned
    assert plan_launch(settings, timeout=5).timeout == 5.0
    with pytest.raises(ValueError, match="ui='web' is not valid"):
        plan_launch(num_processes=2, ui="web")
    with pytest.raises(TypeError, match="bogus is not a setting of notebook_launcher"):
        plan_launch(num_processes=2, bogus=1)


def test_more_processes_than_gpus_are_refused_when_planned():
    """Checked on any machine with a backend that says it has one GPU (nothing is started)."""
    from notebook_launcher.backends.cuda import CudaBackend

    class OneGpu(CudaBackend):
        def device_count(self) -> int:
            return 1

    with pytest.raises(ValueError) as info:
        plan_launch(num_processes=2, backend=OneGpu())
    message = str(info.value)
    assert "num_processes=2" in message and "1 GPU:" in message
    assert "at most one process per GPU" in message


def test_settings_a_cluster_does_not_use_are_refused_naming_them():
    from notebook_launcher import RayCluster

    with pytest.raises(ValueError, match=r"use_port=29501 .*cluster='ray'.*rendezvous"):
        plan_launch(num_processes=2, cluster="ray", use_port=29501)
    with pytest.raises(ValueError, match=r"use_port='0' .*cluster=RayCluster"):
        plan_launch(num_processes=2, cluster=RayCluster(timeout=5), use_port="0")
    plan_launch(num_processes=2, cluster="ray", use_port="29500")  # the default, as a str
    with pytest.raises(ValueError, match=r"runtime_env=\{'bogus_key': 1\}.*'bogus_key'.*pip"):
        RayCluster(runtime_env={"bogus_key": 1})
    RayCluster(runtime_env={"env_vars": {"A": "1"}, "pip": ["six"]})
