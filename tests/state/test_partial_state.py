"""PartialState in a single, unlaunched process."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from notebook_launcher.state import DistributedType, PartialState
from notebook_launcher.utils.kwargs import GradScalerKwargs, InitProcessGroupKwargs


def test_single_process_defaults():
    state = PartialState()
    assert state.initialized
    assert state.distributed_type is DistributedType.NO
    assert (state.num_processes, state.process_index, state.local_process_index) == (1, 0, 0)
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert not state.use_distributed
    assert state.backend is None
    assert state.device == torch.device("cpu")  # no GPU on this machine
    assert state.debug is False
    assert not dist.is_initialized()  # one process needs no process group


def test_repr_is_readable():
    text = repr(PartialState())
    assert text == (
        "Distributed environment: NO\nNum processes: 1\nProcess index: 0\n"
        "Local process index: 0\nDevice: cpu\n"
    )


def test_instances_share_one_state_created_by_the_first():
    first = PartialState(cpu=True, debug=True)
    second = PartialState(debug=False)  # later arguments do not change the shared state
    assert second.debug is True
    assert second.__dict__ is first.__dict__
    first.custom = 5
    assert PartialState().custom == 5


def test_debug_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "yes")
    assert PartialState().debug is True
    PartialState._reset_state()
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "0")
    assert PartialState().debug is False
    PartialState._reset_state()
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "maybe")
    with pytest.raises(ValueError, match="ACCELERATE_DEBUG_MODE='maybe'"):
        PartialState()
    assert not PartialState._shared_state  # nothing half-made


def test_reset_then_old_instance_explains_itself():
    state = PartialState()
    PartialState._reset_state()
    assert not state.initialized
    with pytest.raises(AttributeError, match="shared state was reset"):
        _ = state.process_index
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = state.nonsense
    assert PartialState().process_index == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cpu": "yes"}, TypeError, "cpu='yes'"),
        ({"debug": 1}, TypeError, "debug=1"),
        ({"timeout": 30}, TypeError, "timeout=30.*timedelta"),
        ({"backend": 5}, TypeError, "backend=5"),
        ({"mixed_precision": "fp16"}, TypeError, "mixed_precision.*allowed are cpu"),
        ({"kwargs_handlers": [object()]}, TypeError, "kwargs_handlers.*KwargsHandler"),
        (
            {"kwargs_handlers": [InitProcessGroupKwargs(), InitProcessGroupKwargs()]},
            ValueError,
            "at most one InitProcessGroupKwargs",
        ),
        (
            {
                "timeout": timedelta(seconds=1),
                "kwargs_handlers": [InitProcessGroupKwargs(timeout=timedelta(seconds=2))],
            },
            ValueError,
            "timeout given both",
        ),
    ],
)
def test_bad_arguments_name_the_parameter_and_store_nothing(kwargs, error, message):
    with pytest.raises(error, match=message):
        PartialState(**kwargs)
    assert not PartialState._shared_state


def test_process_group_settings_are_accepted_unlaunched():
    handlers = [GradScalerKwargs(), InitProcessGroupKwargs(timeout=timedelta(seconds=9))]
    state = PartialState(kwargs_handlers=handlers)
    assert state.distributed_type is DistributedType.NO  # nothing to create in one process
    PartialState._reset_state()
    assert PartialState(**InitProcessGroupKwargs(backend="gloo").to_kwargs()).backend is None


def test_process_control_in_one_process():
    state = PartialState()
    calls = []

    @state.on_main_process
    def main():
        calls.append("main")
        return "main"

    @state.on_process(process_index=3)  # a single process runs everything, as in Accelerate
    def third():
        calls.append("third")

    @state.on_local_process(local_process_index=1)
    def local_one():
        calls.append("local_one")

    @state.on_last_process
    def last():
        calls.append("last")

    @state.on_local_main_process()
    def local_main():
        calls.append("local_main")

    assert main() == "main"
    third(), local_one(), last(), local_main()
    assert calls == ["main", "third", "local_one", "last", "local_main"]
    with state.main_process_first(), state.local_main_process_first():
        state.wait_for_everyone()
    with state.split_between_processes([1, 2, 3], apply_padding=True) as part:
        assert part == [1, 2, 3]


def test_decorator_arguments_are_checked():
    state = PartialState()
    with pytest.raises(TypeError, match="process_index=None"):
        state.on_process(lambda: None)
    with pytest.raises(TypeError, match="process_index='0'"):
        state.on_process(process_index="0")(lambda: None)
    with pytest.raises(ValueError, match="local_process_index=-1"):
        state.on_local_process(local_process_index=-1)(lambda: None)
    with pytest.raises(TypeError, match="function=5"):
        state.on_main_process(5)


def test_decorators_need_the_state():
    state = PartialState()
    PartialState._reset_state()
    with pytest.raises(ValueError, match="not initialised"):
        state.on_main_process(print)


def test_print_on_the_main_process(capsys):
    PartialState().print("hello", 1, sep="-")
    assert capsys.readouterr().out == "hello-1\n"


def test_default_device_and_set_device():
    state = PartialState()
    assert state.default_device == torch.device("cpu")
    state.set_device()  # a no-op on the CPU


def test_destroy_process_group_without_a_group_is_a_no_op():
    PartialState().destroy_process_group()


def test_an_existing_process_group_is_adopted(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        state = PartialState()
        assert state.distributed_type is DistributedType.MULTI_CPU
        assert state.backend == "gloo"
        assert (state.num_processes, state.process_index) == (1, 0)
        assert not state.use_distributed
        state.wait_for_everyone()  # a real barrier on the group of one
    finally:
        state.destroy_process_group()
    assert not dist.is_initialized()


def test_reset_state_forgets_every_singleton():
    from notebook_launcher.backends import _chosen, detect_backend
    from notebook_launcher.state import AcceleratorState, GradientState, reset_state

    AcceleratorState(_from_accelerator=True)
    GradientState()
    detect_backend()
    assert PartialState._shared_state and AcceleratorState._shared_state
    assert GradientState._shared_state and _chosen
    reset_state()
    assert not PartialState._shared_state and not AcceleratorState._shared_state
    assert not GradientState._shared_state and not _chosen


def test_torchrun_variables_make_a_job_and_a_wrong_backend_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(
        ValueError, match="backend='nccl' is not valid: on cpu devices use one of 'gloo'"
    ):
        PartialState(backend="nccl")
    assert not PartialState._shared_state and not dist.is_initialized()
    state = PartialState(init_method=f"file://{tmp_path}/store")
    try:
        assert state.distributed_type is DistributedType.MULTI_CPU and state.backend == "gloo"
        assert dist.get_world_size() == 1
    finally:
        state.destroy_process_group()
