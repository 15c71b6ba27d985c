"""The public enums: Accelerate's members and values, string behaviour, ``.list()``."""

from __future__ import annotations

import json

import pytest

from notebook_launcher.utils.enums import (
    DDPCommunicationHookType,
    DistributedType,
    LoggerType,
    PrecisionType,
    RNGType,
)

ACCELERATE_1_15 = {
    DistributedType: [
        "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
        "MULTI_XPU", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON",
    ],
    PrecisionType: ["no", "fp8", "fp16", "bf16"],
    LoggerType: [
        "all", "aim", "tensorboard", "wandb", "trackio", "comet_ml", "mlflow", "clearml",
        "dvclive", "swanlab",
    ],
    RNGType: [
        "torch", "cuda", "mlu", "sdaa", "musa", "npu", "xla", "xpu", "hpu", "neuron", "generator",
    ],
    DDPCommunicationHookType: ["no", "fp16", "bf16", "power_sgd", "batched_power_sgd"],
}  # fmt: skip


@pytest.mark.parametrize("enum", list(ACCELERATE_1_15), ids=lambda e: e.__name__)
def test_values_and_order_match_accelerate(enum):
    assert enum.list() == ACCELERATE_1_15[enum]


@pytest.mark.parametrize("enum", list(ACCELERATE_1_15), ids=lambda e: e.__name__)
def test_members_are_strings_that_compare_and_print_as_their_value(enum):
    for member in enum:
        assert isinstance(member, str)
        assert member == member.value
        assert str(member) == member.value
        assert f"{member}" == member.value
        assert member.value in enum
        assert enum(member.value) is member
    assert "not-a-member" not in enum
    assert 3 not in enum
    assert [1] not in enum


def test_tpu_is_an_alias_of_xla():
    assert DistributedType.TPU is DistributedType.XLA
    assert DistributedType["TPU"] is DistributedType.XLA
    assert DistributedType.list().count("XLA") == 1


def test_json_serialisable():
    assert json.dumps({"t": DistributedType.MULTI_CPU}) == '{"t": "MULTI_CPU"}'


def test_member_names_of_accelerate_enums():
    assert PrecisionType.BF16 == "bf16"
    assert LoggerType.COMETML == "comet_ml"
    assert RNGType.GENERATOR == "generator"
    assert DDPCommunicationHookType.BATCHED_POWER_SGD == "batched_power_sgd"


def test_same_members_as_the_installed_accelerate():
    import accelerate.utils.dataclasses as dataclasses

    for enum in ACCELERATE_1_15:
        theirs = getattr(dataclasses, enum.__name__)
        assert [(m.name, m.value) for m in enum] == [(m.name, m.value) for m in theirs]
