"""Public names take the same parameters, in the same order, with the same defaults as Accelerate."""

from __future__ import annotations

import dataclasses
import enum
import inspect

import pytest
from accelerate import state as their_state  # noqa: E402
from accelerate import utils as their_utils  # noqa: E402
from accelerate.utils import dataclasses as their_dataclasses  # noqa: E402

from notebook_launcher.backends.config_file import write_basic_config
from notebook_launcher.state import AcceleratorState, GradientState, PartialState
from notebook_launcher.utils import environment, memory, versions
from notebook_launcher.utils import kwargs as ours_kwargs

OURS_AND_THEIRS = [
    (PartialState, their_state.PartialState),
    (AcceleratorState, their_state.AcceleratorState),
    (GradientState, their_state.GradientState),
    (environment.is_bf16_available, their_utils.is_bf16_available),
    (environment.is_torch_xla_available, their_utils.is_torch_xla_available),
    (environment.is_cuda_available, their_utils.is_cuda_available),
    (environment.is_mps_available, their_utils.is_mps_available),
    (versions.is_torch_version, their_utils.is_torch_version),
    (versions.compare_versions, their_utils.compare_versions),
    (memory.get_max_memory, their_utils.get_max_memory),
    (write_basic_config, their_utils.write_basic_config),
] + [
    (getattr(ours_kwargs, name), getattr(their_dataclasses, name))
    for name in (
        "AutocastKwargs",
        "DistributedDataParallelKwargs",
        "GradScalerKwargs",
        "InitProcessGroupKwargs",
        "FP8RecipeKwargs",
        "ProfileKwargs",
        "GradientAccumulationPlugin",
    )
    # Accelerate 1.16 no longer has FP8RecipeKwargs; ours keeps it for code
    # written against 1.0-1.15, and it is compared where the installed Accelerate still has it.
    if hasattr(their_dataclasses, name)
]


def _shape(function):
    def default(value):
        return value.value if isinstance(value, enum.Enum) else value

    return [
        (p.name, p.kind, default(p.default))
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize(("ours", "theirs"), OURS_AND_THEIRS, ids=lambda f: f.__name__)
def test_same_parameters_order_and_defaults(ours, theirs):
    assert _shape(ours) == _shape(theirs)


def test_same_dataclass_fields():
    for ours, theirs in OURS_AND_THEIRS:
        if dataclasses.is_dataclass(ours):
            assert [f.name for f in dataclasses.fields(ours)] == [
                f.name for f in dataclasses.fields(theirs)
            ]


def test_kwargs_match_accelerate_where_both_can_be_built():
    for name in ("AutocastKwargs", "DistributedDataParallelKwargs", "GradScalerKwargs"):
        ours, theirs = getattr(ours_kwargs, name)(), getattr(their_dataclasses, name)()
        assert ours.to_dict() == theirs.to_dict()
        assert ours.to_kwargs() == theirs.to_kwargs() == {}
    custom = {"find_unused_parameters": True, "bucket_cap_mb": 50}
    assert (
        ours_kwargs.DistributedDataParallelKwargs(**custom).to_kwargs()
        == their_dataclasses.DistributedDataParallelKwargs(**custom).to_kwargs()
        == custom
    )
    plugin = {"num_steps": 4, "sync_each_batch": True}
    assert (
        ours_kwargs.GradientAccumulationPlugin(**plugin).to_kwargs()
        == their_dataclasses.GradientAccumulationPlugin(**plugin).to_kwargs()
    )
