"""Settings dataclasses ("kwargs handlers") for autocast, DDP, grad scaling and process groups.

Each has ``to_kwargs()``, the fields that differ from the defaults, ready to pass on:
``PartialState(**InitProcessGroupKwargs(timeout=timedelta(minutes=5)).to_kwargs())``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .dataclasses import GradientAccumulationPlugin, KwargsHandler
from .enums import DDPCommunicationHookType
from .fp8 import FP8RecipeKwargs
from .profiling import ProfileKwargs
from .validation import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_optional_bool,
    check_optional_str,
    invalid,
)


@dataclass
class AutocastKwargs(KwargsHandler):
    """Settings of ``torch.autocast`` for mixed precision.

    Args:
        enabled: whether autocast is on in the regions that use it.
        cache_enabled: whether autocast caches weight casts (None: torch's default).
    """

    enabled: bool = True
    cache_enabled: bool | None = None

    def __post_init__(self) -> None:
        check_bool("enabled", self.enabled)
        check_optional_bool("cache_enabled", self.cache_enabled)


_WRAPPERS = (
    DDPCommunicationHookType.NO,
    DDPCommunicationHookType.FP16,
    DDPCommunicationHookType.BF16,
)


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Settings of ``torch.nn.parallel.DistributedDataParallel``, and its communication hook.

    The first seven fields are DDP's own arguments (see its documentation). ``comm_hook``
    compresses or approximates the gradient all-reduce (fp16, bf16, PowerSGD, batched
    PowerSGD); ``comm_wrapper`` (no, fp16, bf16) wraps a PowerSGD hook to compress what it
    sends; ``comm_state_option`` holds PowerSGD settings such as ``matrix_approximation_rank``.
    The hook fields are not DDP arguments, so ``to_kwargs()`` leaves them out; apply them with
    :meth:`register_comm_hook` once the model is wrapped.

    Example:
        >>> ddp = DistributedDataParallelKwargs(comm_hook="fp16")
        >>> model = DDP(net, **ddp.to_kwargs())
        >>> ddp.register_comm_hook(model)
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("dim", self.dim)
        check_number("bucket_cap_mb", self.bucket_cap_mb, positive=True)
        for name in (
            "broadcast_buffers",
            "find_unused_parameters",
            "check_reduction",
            "gradient_as_bucket_view",
            "static_graph",
        ):
            check_bool(name, getattr(self, name))
        hook, wrapper = (
            value.value if isinstance(value, DDPCommunicationHookType) else value
            for value in (self.comm_hook, self.comm_wrapper)
        )
        self.comm_hook = DDPCommunicationHookType(
            check_choice("comm_hook", hook, DDPCommunicationHookType.list(), str.lower)
        )
        wrappers = [w.value for w in _WRAPPERS]
        self.comm_wrapper = DDPCommunicationHookType(
            check_choice("comm_wrapper", wrapper, wrappers, str.lower)
        )
        if not isinstance(self.comm_state_option, dict):
            raise invalid("comm_state_option", self.comm_state_option, "expected a dict", TypeError)

    def to_dict(self, ignore_keys=("comm_hook", "comm_wrapper", "comm_state_option")) -> dict:
        """The fields, without those that are not DDP arguments."""
        return {k: v for k, v in super().to_dict().items() if k not in ignore_keys}

    def register_comm_hook(self, model: Any) -> None:
        """Register the chosen communication hook on a ``DistributedDataParallel`` model.

        Does nothing when ``comm_hook`` is "no".

        Raises:
            TypeError: ``model`` is not wrapped in DistributedDataParallel.
        """
        if self.comm_hook is DDPCommunicationHookType.NO:
            return
        if not hasattr(model, "register_comm_hook"):
            raise invalid(
                "model", type(model).__name__, "expected a DistributedDataParallel model", TypeError
            )
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        hooks = {
            DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
            DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
            DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
            DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
        }
        wrappers = {
            DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
            DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
        }
        hook = hooks[self.comm_hook]
        if self.comm_wrapper in wrappers:
            hook = wrappers[self.comm_wrapper](hook)
        state = None
        if self.comm_hook in (
            DDPCommunicationHookType.POWER_SGD,
            DDPCommunicationHookType.BATCHED_POWER_SGD,
        ):
            state = powerSGD_hook.PowerSGDState(None, **self.comm_state_option)
        model.register_comm_hook(state=state, hook=hook)


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Settings of ``torch.amp.GradScaler`` for fp16 training (see its documentation)."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True

    def __post_init__(self) -> None:
        check_number("init_scale", self.init_scale, positive=True)
        if check_number("growth_factor", self.growth_factor) <= 1.0:
            raise invalid("growth_factor", self.growth_factor, "expected a number > 1.0")
        if not 0.0 < check_number("backoff_factor", self.backoff_factor) < 1.0:
            raise invalid("backoff_factor", self.backoff_factor, "expected 0 < backoff_factor < 1")
        check_int("growth_interval", self.growth_interval, 1)
        check_bool("enabled", self.enabled)


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Settings of ``torch.distributed.init_process_group`` used when the state creates the group.

    Args:
        backend: process-group backend. Only a value other than the default "nccl" is passed on
            (``to_kwargs()``), so by default each device uses its own: gloo on CPUs, nccl on GPUs.
        init_method: rendezvous URL (None: ``env://``, the variables the launcher sets).
        timeout: how long collectives may wait before failing. None fills in Accelerate's
            default from ``backend``: 600 s for "nccl" (so ``InitProcessGroupKwargs().timeout``
            is 600 s), 1800 s for any other backend. ``to_kwargs()`` leaves out a filled-in
            default, so the group then gets torch's default for the backend it is created with
            (10 minutes for nccl, 30 minutes for gloo); see :meth:`effective_timeout`.

    Note:
        A timeout you pass is always part of ``to_kwargs()``, even when it equals the
        filled-in default: Accelerate compares it with the default and drops it, so
        ``InitProcessGroupKwargs(timeout=timedelta(seconds=600))`` on a gloo group waits
        torch's 30 minutes there.

    Example:
        >>> kwargs = InitProcessGroupKwargs(timeout=timedelta(minutes=5))
        >>> state = PartialState(**kwargs.to_kwargs())
    """

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        check_optional_str("backend", self.backend)
        check_optional_str("init_method", self.init_method)
        given = self.timeout is not None
        if given:
            if not isinstance(self.timeout, timedelta):
                raise invalid(
                    "timeout", self.timeout, "expected a datetime.timedelta or None", TypeError
                )
            if self.timeout <= timedelta(0):
                raise invalid("timeout", self.timeout, "expected a positive duration")
        else:
            self.timeout = timedelta(seconds=600 if self.backend == "nccl" else 1800)
        self._timeout_given = given

    def to_dict(self) -> dict[str, Any]:
        """Every field, deep-copied."""
        return {k: v for k, v in super().to_dict().items() if not k.startswith("_")}

    def to_kwargs(self) -> dict[str, Any]:
        """The fields that differ from the defaults, and the timeout whenever one was given."""
        kwargs = super().to_kwargs()
        if self._timeout_given:
            kwargs["timeout"] = self.timeout
        return kwargs

    def effective_timeout(self, backend: str | None = None) -> timedelta:
        """The timeout a group created with these settings gets on ``backend`` (default: ours)."""
        given = self.to_kwargs().get("timeout")
        if given is not None:
            return given
        from torch.distributed import constants

        name = backend or self.backend
        if name == "nccl":
            return constants.default_pg_nccl_timeout or timedelta(minutes=10)
        return constants.default_pg_timeout


__all__ = [
    "AutocastKwargs",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "FP8RecipeKwargs",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "ProfileKwargs",
]
