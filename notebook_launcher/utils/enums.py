"""Public enums describing a job, with the members, values and string behaviour of Accelerate's.

As in Accelerate, three kinds of enum are used:

* ``DistributedType`` is a ``str`` enum: members compare equal to their values
  (``DistributedType.NO == "NO"``) and ``str(DistributedType.NO)`` is ``"DistributedType.NO"``.
* ``PrecisionType`` is a ``str`` enum whose ``str()`` is its value: ``PrecisionType.FP16 ==
  "fp16"`` and ``str(PrecisionType.FP16) == "fp16"``.
* ``LoggerType``, ``RNGType`` and ``DDPCommunicationHookType`` are plain enums whose ``str()`` is
  their value but which are not strings: ``LoggerType.WANDB != "wandb"``; compare
  ``str(member)`` or ``member.value``, or convert with ``LoggerType("wandb")``.

Every one accepts ``value in SomeEnum`` and has ``.list()``, the values in definition order.
"""

from __future__ import annotations

import enum


class _ContainsValues(enum.EnumMeta):
    """Lets ``value in SomeEnum`` test the values, as Accelerate's enums do."""

    def __contains__(cls, item: object) -> bool:
        try:
            cls(item)
        except (ValueError, TypeError):
            return False
        return True


class BaseEnum(enum.Enum, metaclass=_ContainsValues):
    """An enum whose ``str()`` is its value (its members are not strings)."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def list(cls) -> list[str]:
        """Every value, in definition order (aliases not repeated)."""
        return [member.value for member in cls]


class StrEnum(str, BaseEnum):
    """A string enum whose ``str()`` is its value."""


class DistributedType(str, enum.Enum, metaclass=_ContainsValues):
    """How the processes of a job are connected.

    ``NO`` is a single process; ``MULTI_CPU``/``MULTI_GPU``/``MULTI_*`` are data-parallel jobs on
    that kind of device; ``DEEPSPEED``, ``FSDP`` and ``MEGATRON_LM`` name those engines; ``XLA``
    is a TPU (or other XLA device) job. ``TPU`` is an alias of ``XLA``.

    ``str(DistributedType.NO)`` is ``"DistributedType.NO"`` and ``format()`` follows Python's
    rule for ``str`` enums, as in Accelerate; ``.value`` is ``"NO"``.

    Note:
        Unlike Accelerate, ``"NO" in DistributedType`` is True on every Python version (on
        Python < 3.12 Accelerate's raises TypeError), it has ``.list()``, and the ``TPU`` alias
        is kept for code written against older releases.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    TPU = "XLA"  # alias of XLA

    @classmethod
    def list(cls) -> list[str]:
        """Every value, in definition order (the TPU alias not repeated)."""
        return [member.value for member in cls]


class PrecisionType(StrEnum):
    """Mixed-precision modes: none, 8-bit, 16-bit float or bfloat16."""

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"


# The mixed_precision values a launch, a config file or the torchrun command accept, in the order
# error messages list them.
MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16", "fp8")


class LoggerType(BaseEnum):
    """Experiment trackers, by the name used to select them (``ALL`` means every one installed)."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"


class RNGType(BaseEnum):
    """Random number generators that can be synchronised across processes."""

    TORCH = "torch"
    CUDA = "cuda"
    MLU = "mlu"
    SDAA = "sdaa"
    MUSA = "musa"
    NPU = "npu"
    XLA = "xla"
    XPU = "xpu"
    HPU = "hpu"
    NEURON = "neuron"
    GENERATOR = "generator"


class DDPCommunicationHookType(BaseEnum):
    """Gradient communication hooks for DistributedDataParallel.

    ``FP16``/``BF16`` compress gradients to that type before the all-reduce; ``POWER_SGD`` and
    ``BATCHED_POWER_SGD`` use PowerSGD low-rank compression. ``NO`` keeps torch's default.
    """

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"
