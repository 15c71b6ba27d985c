"""AcceleratorState in one process: creation by the Accelerator, precision, refusals."""

from __future__ import annotations

import pytest

from notebook_launcher.state import AcceleratorState, DistributedType, PartialState, is_initialized


def test_created_by_the_accelerator_with_partial_state_inside():
    state = AcceleratorState(mixed_precision="BF16", _from_accelerator=True)
    assert state.initialized and is_initialized()
    assert state.mixed_precision == "bf16"
    assert PartialState().initialized
    for name in (
        "device", "distributed_type", "num_processes", "process_index", "local_process_index",
        "is_main_process", "is_local_main_process", "is_last_process", "use_distributed",
        "backend", "debug",
    ):  # fmt: skip
        assert getattr(state, name) == getattr(PartialState(), name), name
    assert state.distributed_type is DistributedType.NO
    assert repr(state) == repr(PartialState()) + "\nMixed precision type: bf16\n"
    assert (state.deepspeed_plugin, state.fsdp_plugin, state.megatron_lm_plugin) == (None,) * 3


def test_forwards_the_process_helpers():
    state = AcceleratorState(_from_accelerator=True)
    ran = []
    state.on_main_process(lambda: ran.append("main"))()
    state.on_process(process_index=0)(lambda: ran.append("zero"))()
    with state.main_process_first(), state.split_between_processes([1, 2]) as part:
        state.wait_for_everyone()
    assert ran == ["main", "zero"] and part == [1, 2]


def test_refused_before_an_accelerator_and_nothing_is_left_half_made():
    with pytest.raises(ValueError, match=r"Accelerator\(\.\.\.\)` first"):
        AcceleratorState()
    assert not AcceleratorState._shared_state
    assert not is_initialized()
    assert not PartialState._shared_state  # not even the process state was created
    state = AcceleratorState(_from_accelerator=True)  # the Accelerator can still create it
    assert state.mixed_precision == "no"
    assert AcceleratorState().mixed_precision == "no"  # and later instances share it


def test_precision_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "FP16")
    assert AcceleratorState(_from_accelerator=True).mixed_precision == "fp16"
    AcceleratorState._reset_state()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp4")
    with pytest.raises(
        ValueError, match="ACCELERATE_MIXED_PRECISION='fp4'.*'no', 'fp8', 'fp16', 'bf16'"
    ):
        AcceleratorState(_from_accelerator=True)
    assert not AcceleratorState._shared_state


def test_invalid_precision_lists_the_choices():
    with pytest.raises(ValueError, match="mixed_precision='half'.*'no', 'fp8', 'fp16', 'bf16'"):
        AcceleratorState(mixed_precision="half", _from_accelerator=True)
    with pytest.raises(TypeError, match="mixed_precision=16"):
        AcceleratorState(mixed_precision=16, _from_accelerator=True)
    assert not AcceleratorState._shared_state


def test_fp8_needs_an_fp8_package():
    with pytest.raises(ValueError, match="transformer_engine, MS-AMP"):
        AcceleratorState(mixed_precision="fp8", _from_accelerator=True)
    assert not AcceleratorState._shared_state


@pytest.mark.parametrize(
    "plugin",
    [
        "deepspeed_plugin",
        "fsdp_plugin",
        "megatron_lm_plugin",
        "torch_tp_plugin",
        "parallelism_config",
    ],
)
def test_out_of_scope_plugins(plugin):
    with pytest.raises(NotImplementedError, match=f"{plugin}=object.*out of scope"):
        AcceleratorState(_from_accelerator=True, **{plugin: object()})
    assert not AcceleratorState._shared_state


def test_cannot_change_once_created():
    AcceleratorState(mixed_precision="bf16", _from_accelerator=True)
    AcceleratorState(mixed_precision="bf16")  # the same settings are fine
    with pytest.raises(ValueError, match="mixed_precision='fp16'.*first"):
        AcceleratorState(mixed_precision="fp16")
    assert AcceleratorState().mixed_precision == "bf16"


def test_use_cpu_switch_and_kwargs_reach_partial_state(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    state = AcceleratorState(_from_accelerator=True, debug=True)
    assert PartialState()._cpu is True
    assert state.debug is True


def test_reset_state_keeps_or_drops_partial_state():
    AcceleratorState(_from_accelerator=True)
    AcceleratorState._reset_state()
    assert not AcceleratorState._shared_state and PartialState._shared_state
    AcceleratorState(_from_accelerator=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    assert not AcceleratorState._shared_state and not PartialState._shared_state


def test_reset_instance_explains_itself():
    state = AcceleratorState(_from_accelerator=True)
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError, match="reset and not created again"):
        _ = state.mixed_precision
