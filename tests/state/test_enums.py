"""The public enums: Accelerate's members, values and string behaviour, ``.list()``."""

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


def _behaviour(member):
    """How a member behaves as a string: each probe's result, or the exception type it raises."""
    import warnings

    probes = {
        "str": str,
        "repr": repr,
        "format": format,
        "f-string": lambda m: f"{m}",
        "percent": lambda m: "%s" % m,  # noqa: UP031 (the %-operator is what is probed)
        "== value": lambda m: m == m.value,
        "isinstance str": lambda m: isinstance(m, str),
        "hash is the value's": lambda m: hash(m) == hash(m.value),
        "json": lambda m: json.dumps(m),
        "lower": lambda m: m.lower(),
        "from value": lambda m: type(m)(m.value).name,
        "from member": lambda m: type(m)(m).name,
        "sorted with its value": lambda m: sorted([m, m.value]),
    }
    seen = {}
    for name, probe in probes.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                seen[name] = probe(member)
            except Exception as exc:
                seen[name] = type(exc).__name__
    return seen


@pytest.mark.parametrize("enum", list(ACCELERATE_1_15), ids=lambda e: e.__name__)
def test_members_behave_as_strings_as_accelerate_members_do(enum):
    import accelerate.utils.dataclasses as dataclasses

    theirs = getattr(dataclasses, enum.__name__)
    for member in enum:
        assert _behaviour(member) == _behaviour(theirs(member.value)), member
        assert member.value in enum
        assert enum(member.value) is member
    assert "not-a-member" not in enum
    assert 3 not in enum
    assert [1] not in enum


def test_which_enums_are_strings():
    assert str(DistributedType.NO) == "DistributedType.NO" and DistributedType.NO == "NO"
    assert str(PrecisionType.FP16) == "fp16" and PrecisionType.FP16 == "fp16"
    for member in (LoggerType.WANDB, RNGType.TORCH, DDPCommunicationHookType.FP16):
        assert str(member) == member.value and not isinstance(member, str)
        assert member != member.value and member.value in type(member)


def test_tpu_is_an_alias_of_xla():
    assert DistributedType.TPU is DistributedType.XLA
    assert DistributedType["TPU"] is DistributedType.XLA
    assert DistributedType.list().count("XLA") == 1


def test_json_serialisable_where_accelerate_is():
    assert json.dumps({"t": DistributedType.MULTI_CPU}) == '{"t": "MULTI_CPU"}'
    assert json.dumps({"p": PrecisionType.BF16}) == '{"p": "bf16"}'


def test_member_names_of_accelerate_enums():
    assert PrecisionType.BF16.value == "bf16"
    assert LoggerType.COMETML.value == "comet_ml"
    assert RNGType.GENERATOR.value == "generator"
    assert DDPCommunicationHookType.BATCHED_POWER_SGD.value == "batched_power_sgd"


def test_same_members_as_the_installed_accelerate():
    import accelerate.utils.dataclasses as dataclasses

    for enum in ACCELERATE_1_15:
        theirs = getattr(dataclasses, enum.__name__)
        assert [(m.name, m.value) for m in enum] == [(m.name, m.value) for m in theirs]
