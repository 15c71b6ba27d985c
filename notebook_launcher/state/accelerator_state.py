"""AcceleratorState: the PartialState of this process plus the Accelerator's training settings."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..protocol.context import current_context
from ..utils.enums import DistributedType, PrecisionType
from ..utils.environment import parse_flag_from_env
from ..utils.replicas import ReplicaLocalDict
from ..utils.validation import check_bool, check_choice, invalid
from .mixing import check_ours_may_start
from .partial import PartialState

FP8_PACKAGES = ("transformer_engine", "msamp", "torchao")


def _from_partial(name: str) -> property:
    def read(self: AcceleratorState) -> Any:
        return getattr(PartialState(), name)

    return property(read, doc=f"``PartialState().{name}``.")


def _mixed_precision(value: str | None) -> str:
    """The precision asked for, else the launch's, else ``ACCELERATE_MIXED_PRECISION``, else no."""
    if value is None:
        context = current_context()
        if context is not None:
            return check_choice("mixed_precision", context.mixed_precision, PrecisionType.list())
        value = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        name = "ACCELERATE_MIXED_PRECISION"
    else:
        name = "mixed_precision"
    return check_choice(name, value, PrecisionType.list(), str.lower)


def _check_fp8_available() -> None:
    if not any(importlib.util.find_spec(name) for name in FP8_PACKAGES):
        raise ValueError(
            "mixed_precision='fp8' needs one of the FP8 packages transformer_engine, MS-AMP "
            "(msamp) or torchao, and none is installed; use 'bf16' or 'fp16', or install one."
        )


class AcceleratorState:
    """Everything :class:`PartialState` knows, plus the mixed-precision setting of the Accelerator.

    Shared by every instance in the process, like ``PartialState`` (whose attributes and
    methods it forwards). It is created by the Accelerator: ``AcceleratorState()`` before
    that raises a ValueError that says so, and stores nothing.

    Args:
        mixed_precision: "no", "fp16", "bf16" or "fp8" (any case). Default: the launch's
            ``mixed_precision`` in a ``notebook_launcher`` worker, else the
            ``ACCELERATE_MIXED_PRECISION`` environment variable, else "no".
        cpu: use the CPU even where GPUs exist (also set by ``ACCELERATE_USE_CPU``).
        dynamo_plugin: a ``torch.compile`` configuration, kept as given.
        deepspeed_plugin, fsdp_plugin, torch_tp_plugin, megatron_lm_plugin,
            parallelism_config: must be None (see the note).
        _from_accelerator: True when the Accelerator creates the state.
        **kwargs: passed on to :class:`PartialState` (process-group settings, ``debug``).

    Note:
        DeepSpeed, FSDP, tensor/context parallelism and Megatron-LM are out of scope of this
        package: passing one of their plugins raises NotImplementedError. Unlike Accelerate, a
        refused ``AcceleratorState()`` leaves nothing half-initialised behind, and the
        Accelerator can still create the state afterwards. A process where Accelerate's own
        ``AcceleratorState`` exists (``accelerate.Accelerator``, ``transformers.Trainer``)
        cannot create this one: RuntimeError.
    """

    _shared_state = ReplicaLocalDict()  # per thread where XLA replicas are threads
    _known_attrs = ("_mixed_precision", "dynamo_plugin")

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool = False,
        dynamo_plugin: Any = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        parallelism_config: Any = None,
        _from_accelerator: bool = False,
        **kwargs: Any,
    ) -> None:
        self.__dict__ = self._shared_state
        check_bool("cpu", cpu)
        check_bool("_from_accelerator", _from_accelerator)
        plugins = dict(
            deepspeed_plugin=deepspeed_plugin,
            fsdp_plugin=fsdp_plugin,
            torch_tp_plugin=torch_tp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
            parallelism_config=parallelism_config,
        )
        for name, plugin in plugins.items():
            if plugin is not None:
                raise NotImplementedError(
                    f"{name}={type(plugin).__name__}(...): DeepSpeed, FSDP, tensor/context "
                    "parallelism and Megatron-LM are out of scope of notebook_launcher, which "
                    "runs data-parallel (DDP) jobs; leave it None or use Accelerate itself."
                )
        cpu = cpu or parse_flag_from_env("ACCELERATE_USE_CPU")
        if mixed_precision is not None:
            mixed_precision = check_choice(
                "mixed_precision", mixed_precision, PrecisionType.list(), str.lower
            )
        if self.initialized:
            self._check_unchanged(mixed_precision, cpu)
            return
        if not _from_accelerator:
            raise ValueError(
                "AcceleratorState() was created before any Accelerator: create "
                "`accelerator = Accelerator(...)` first (it creates the state), or use "
                "PartialState() for the process information and helpers alone."
            )
        check_ours_may_start()  # not beside accelerate.Accelerator in one process
        precision = _mixed_precision(mixed_precision)
        if precision == "fp8":
            _check_fp8_available()
        PartialState(cpu, **kwargs)
        self._shared_state.update(_mixed_precision=precision, dynamo_plugin=dynamo_plugin)

    def _check_unchanged(self, mixed_precision: str | None, cpu: bool) -> None:
        advice = (
            "AcceleratorState already exists and cannot change: pass `{}` to the first "
            "Accelerator() in this process (in a launched worker, to the launched function's "
            "Accelerator)."
        )
        if cpu and self.device.type != "cpu":
            raise ValueError(advice.format("cpu=True"))
        if mixed_precision is not None and mixed_precision != self._mixed_precision:
            raise ValueError(advice.format(f"mixed_precision={mixed_precision!r}"))

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._known_attrs or isinstance(getattr(type(self), name, None), property):
            raise AttributeError(
                f"AcceleratorState has no attribute {name!r}: the shared state was reset and "
                "not created again by an Accelerator."
            )
        raise AttributeError(f"'AcceleratorState' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"{PartialState()!r}\nMixed precision type: {self.mixed_precision}\n"

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        """Forget the shared state (and PartialState's too with ``reset_partial_state``)."""
        AcceleratorState._shared_state.clear()
        if reset_partial_state:
            PartialState._reset_state()

    @property
    def initialized(self) -> bool:
        """Whether an Accelerator has created the state."""
        return bool(AcceleratorState._shared_state)

    @property
    def mixed_precision(self) -> str:
        """ "no", "fp16", "bf16" or "fp8"."""
        return self._mixed_precision

    deepspeed_plugin = property(lambda self: None, doc="Always None: DeepSpeed is out of scope.")
    fsdp_plugin = property(lambda self: None, doc="Always None: FSDP is out of scope.")
    megatron_lm_plugin = property(lambda self: None, doc="Always None: out of scope.")
    torch_tp_plugin = property(lambda self: None, doc="Always None: out of scope.")
    parallelism_config = property(lambda self: None, doc="Always None: out of scope.")

    device = _from_partial("device")

    @property
    def distributed_type(self) -> DistributedType:
        """The kind of job: ``PartialState().distributed_type`` unless set here.

        Setting it, as Accelerate's own scripts do to try a code path, changes what this
        state (and every Accelerator) reports, not ``PartialState``'s, until the state is reset.
        """
        override = self._shared_state.get("_distributed_type")
        return PartialState().distributed_type if override is None else override

    @distributed_type.setter
    def distributed_type(self, value: DistributedType | str) -> None:
        if not self.initialized:
            raise AttributeError(
                "AcceleratorState has no attribute 'distributed_type': create an Accelerator first"
            )
        allowed = "expected a DistributedType (or its name): " + ", ".join(DistributedType.list())
        if not isinstance(value, (str, DistributedType)):
            raise invalid("distributed_type", value, allowed, TypeError)
        if value not in DistributedType:
            raise invalid("distributed_type", value, allowed)
        self._shared_state["_distributed_type"] = DistributedType(value)

    backend = _from_partial("backend")
    debug = _from_partial("debug")
    num_processes = _from_partial("num_processes")
    process_index = _from_partial("process_index")
    local_process_index = _from_partial("local_process_index")
    is_main_process = _from_partial("is_main_process")
    is_local_main_process = _from_partial("is_local_main_process")
    is_last_process = _from_partial("is_last_process")
    use_distributed = _from_partial("use_distributed")
    default_device = _from_partial("default_device")
    wait_for_everyone = _from_partial("wait_for_everyone")
    main_process_first = _from_partial("main_process_first")
    local_main_process_first = _from_partial("local_main_process_first")
    split_between_processes = _from_partial("split_between_processes")
    on_main_process = _from_partial("on_main_process")
    on_local_main_process = _from_partial("on_local_main_process")
    on_last_process = _from_partial("on_last_process")
    on_process = _from_partial("on_process")
    on_local_process = _from_partial("on_local_process")
    print = _from_partial("print")
    destroy_process_group = _from_partial("destroy_process_group")
