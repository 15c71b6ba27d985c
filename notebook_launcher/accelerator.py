"""The Accelerator: prepare a model, optimizer, data and scheduler for the job, then train.

Example:
    >>> def train():
    ...     accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
    ...     model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    ...     for x, y in loader:
    ...         with accelerator.accumulate(model):
    ...             loss = torch.nn.functional.mse_loss(model(x), y)
    ...             accelerator.backward(loss)
    ...             optimizer.step()
    ...             optimizer.zero_grad()
    >>> notebook_launcher(train, num_processes=2)
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from .accelerator_config import DataLoaderConfiguration, ProjectConfiguration
from .accelerator_distributed import AcceleratorDistributed
from .accelerator_helpers import AcceleratorHelpers
from .accelerator_training import AcceleratorTraining, _check_instance
from .data import prepare_data_loader as _prepare_data_loader
from .optimizer import AcceleratedOptimizer
from .precision import check_autocast, make_scaler, wrap_forward
from .resumable import make_resumable
from .scheduler import AcceleratedScheduler
from .state import AcceleratorState, GradientState, PartialState
from .trackers import resolve_trackers
from .utils.dataclasses import GradientAccumulationPlugin
from .utils.kwargs import (
    AutocastKwargs,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from .utils.validation import check_bool, check_int, invalid

_HANDLERS = {
    AutocastKwargs: "autocast_handler",
    DistributedDataParallelKwargs: "ddp_handler",
    GradScalerKwargs: "scaler_handler",
    InitProcessGroupKwargs: "init_handler",
    ProfileKwargs: "profile_handler",
    FP8RecipeKwargs: "fp8_recipe_handler",
}
_UNSUPPORTED = ("deepspeed_plugin", "fsdp_plugin", "torch_tp_plugin", "megatron_lm_plugin")


class Accelerator(AcceleratorTraining, AcceleratorHelpers, AcceleratorDistributed):
    """Everything a training function needs to run on one or many processes alike.

    Args:
        device_placement: move models and batches to the process's device.
        split_batches: cut each batch across processes (see ``DataLoaderConfiguration``).
        mixed_precision: "no", "fp16" or "bf16" (default: the launch's setting, else
            ``ACCELERATE_MIXED_PRECISION``, else "no").
        gradient_accumulation_steps: batches per optimizer step (>= 1).
        cpu: use the CPU even where an accelerator exists.
        dataloader_config: a :class:`DataLoaderConfiguration`.
        deepspeed_plugin, fsdp_plugin, torch_tp_plugin, megatron_lm_plugin,
            deepspeed_plugins, parallelism_config: must be None (NotImplementedError).
        rng_types: generators synchronised at each epoch (default ``["generator"]``).
        log_with: tracker names ("notebook", "tensorboard", "all") or ``GeneralTracker``s.
        project_dir: where checkpoints and logs go.
        project_config: a :class:`ProjectConfiguration`.
        gradient_accumulation_plugin: a ``GradientAccumulationPlugin`` (instead of
            ``gradient_accumulation_steps``).
        step_scheduler_with_optimizer: schedulers step only when the optimizer does.
        kwargs_handlers: ``AutocastKwargs``, ``DistributedDataParallelKwargs``,
            ``GradScalerKwargs``, ``InitProcessGroupKwargs``, ``ProfileKwargs`` (one of each).
        dynamo_backend: a ``torch.compile`` backend name ("no"/None: no compilation).
        dynamo_plugin: must be None (use ``dynamo_backend``).

    Raises:
        TypeError, ValueError: a bad argument, named in the message.
        NotImplementedError: a DeepSpeed, FSDP, Megatron-LM or tensor-parallel plugin, or fp8.

    Note:
        Deliberate differences from Accelerate: ``split_batches`` defaults to False (not a
        deprecation sentinel); DeepSpeed/FSDP/Megatron-LM/tensor parallelism and fp8 are not
        available; a job of one process is not wrapped in DistributedDataParallel; trackers
        start on every process (each decides: TensorBoard writes from the main process, the
        notebook tracker logs every rank); ``fp16`` on a device that cannot autocast to it
        fails at construction rather than silently running in full precision; ``save_state``
        also records each prepared loader's position in its epoch, and ``load_state`` resumes
        there, so no ``skip_first_batches`` is needed.
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = False,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        rng_types: list[str] | None = None,
        log_with: Any = None,
        project_dir: str | os.PathLike | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list[Any] | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: Any = None,
        deepspeed_plugins: Any = None,
        parallelism_config: Any = None,
    ) -> None:
        if deepspeed_plugins is not None:
            raise NotImplementedError(
                f"deepspeed_plugins={type(deepspeed_plugins).__name__}(...): DeepSpeed is out of "
                "scope of notebook_launcher's Accelerator, which trains data-parallel (DDP)"
            )
        plugins = dict(  # AcceleratorState refuses these with a NotImplementedError
            deepspeed_plugin=deepspeed_plugin,
            fsdp_plugin=fsdp_plugin,
            torch_tp_plugin=torch_tp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
            parallelism_config=parallelism_config,
        )
        if dynamo_plugin is not None:
            raise NotImplementedError(
                "dynamo_plugin is not supported: pass dynamo_backend='inductor' (or another "
                "torch.compile backend name) instead"
            )
        self.device_placement = check_bool("device_placement", device_placement)
        check_bool("split_batches", split_batches)
        check_bool("cpu", cpu)
        check_bool("step_scheduler_with_optimizer", step_scheduler_with_optimizer)
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self._read_handlers(kwargs_handlers)
        self.dataloader_config = _check_instance(
            "dataloader_config", dataloader_config, DataLoaderConfiguration
        ) or DataLoaderConfiguration(split_batches=split_batches)
        if split_batches:
            self.dataloader_config.split_batches = True
        self.project_configuration = (
            _check_instance("project_config", project_config, ProjectConfiguration)
            or ProjectConfiguration()
        )
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        self.dynamo_backend = self._check_dynamo(dynamo_backend)
        init = self.init_handler.to_kwargs() if self.init_handler is not None else {}
        self.state = AcceleratorState(
            mixed_precision=mixed_precision, cpu=cpu, _from_accelerator=True, **plugins, **init
        )
        if self.state.mixed_precision == "fp8":
            raise NotImplementedError(
                "mixed_precision='fp8' is not supported by notebook_launcher's Accelerator: "
                "use 'bf16' or 'fp16'"
            )
        check_autocast(self.device, self.state.mixed_precision)
        self.gradient_state = GradientState(
            self._accumulation_plugin(gradient_accumulation_steps, gradient_accumulation_plugin)
        )
        self.scaler = make_scaler(self.device, self.state.mixed_precision, self.scaler_handler)
        self.rng_types = self._check_rng_types(rng_types)
        self.log_with = resolve_trackers(log_with, self.logging_dir)
        self.trackers: list[Any] = []
        self.step = 0
        self._models: list[Any] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[Any] = []
        self._custom_objects: list[Any] = []
        self._save_model_state_pre_hook: OrderedDict[int, Any] = OrderedDict()
        self._load_model_state_pre_hook: OrderedDict[int, Any] = OrderedDict()
        self.flag_tensor: torch.Tensor | None = None

    def _read_handlers(self, handlers: list[Any] | None) -> None:
        for attribute in _HANDLERS.values():
            setattr(self, attribute, None)
        if handlers is None:
            return
        if not isinstance(handlers, (list, tuple)):
            raise invalid("kwargs_handlers", handlers, "expected a list of handlers", TypeError)
        for handler in handlers:
            attribute = _HANDLERS.get(type(handler))
            if attribute is None:
                allowed = ", ".join(cls.__name__ for cls in _HANDLERS)
                raise invalid(
                    "kwargs_handlers", handler, f"expected instances of {allowed}", TypeError
                )
            if getattr(self, attribute) is not None:
                raise invalid(
                    "kwargs_handlers", handlers, f"only one {type(handler).__name__} is allowed"
                )
            setattr(self, attribute, handler)

    @staticmethod
    def _check_dynamo(backend: Any) -> str | None:
        if backend is None:
            return None
        name = str(backend).lower()
        if not isinstance(backend, str) or not name:
            raise invalid(
                "dynamo_backend", backend, "expected a torch.compile backend name", TypeError
            )
        return None if name == "no" else name

    @staticmethod
    def _accumulation_plugin(steps: Any, plugin: Any) -> GradientAccumulationPlugin:
        check_int("gradient_accumulation_steps", steps, 1)
        _check_instance("gradient_accumulation_plugin", plugin, GradientAccumulationPlugin)
        if plugin is not None:
            if steps != 1:
                raise ValueError(
                    f"gradient_accumulation_steps={steps} and a gradient_accumulation_plugin were "
                    "both given: set num_steps in the plugin only"
                )
            return plugin
        return GradientAccumulationPlugin(num_steps=steps)

    @staticmethod
    def _check_rng_types(rng_types: Any) -> list[str]:
        if rng_types is None:
            return ["generator"]
        if not isinstance(rng_types, (list, tuple)):
            raise invalid("rng_types", rng_types, "expected a list of RNGType values", TypeError)
        return list(rng_types)

    # -- properties --------------------------------------------------------------------------

    device = property(lambda self: self.state.device, doc="The device of this process.")
    distributed_type = property(lambda self: self.state.distributed_type)
    num_processes = property(lambda self: self.state.num_processes)
    process_index = property(lambda self: self.state.process_index)
    local_process_index = property(lambda self: self.state.local_process_index)
    is_main_process = property(lambda self: self.state.is_main_process)
    is_local_main_process = property(lambda self: self.state.is_local_main_process)
    is_last_process = property(lambda self: self.state.is_last_process)
    use_distributed = property(lambda self: self.state.use_distributed)
    mixed_precision = property(lambda self: self.state.mixed_precision)
    split_batches = property(lambda self: self.dataloader_config.split_batches)
    dispatch_batches = property(lambda self: self.dataloader_config.dispatch_batches)
    even_batches = property(lambda self: self.dataloader_config.even_batches)
    use_seedable_sampler = property(lambda self: self.dataloader_config.use_seedable_sampler)
    non_blocking = property(lambda self: self.dataloader_config.non_blocking)
    project_dir = property(lambda self: self.project_configuration.project_dir)
    logging_dir = property(lambda self: self.project_configuration.logging_dir)
    save_iteration = property(lambda self: self.project_configuration.iteration)

    @property
    def sync_gradients(self) -> bool:
        """Whether this step synchronises gradients (the end of an accumulation window)."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state._set_sync_gradients(value)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        check_int("gradient_accumulation_steps", steps, 1)
        self.gradient_state.plugin_kwargs.update({"num_steps": steps})

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether a prepared optimizer skipped its last step (fp16 overflow)."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    # -- prepare -----------------------------------------------------------------------------

    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, data loaders and schedulers for the job.

        Models and loaders are prepared first, then optimizers, then schedulers, whatever the
        order given; the results come back in the order given (one object: not a tuple).
        Other objects pass through unchanged.

        Args:
            *args: the objects.
            device_placement: one bool per object, overriding the Accelerator's setting.

        Raises:
            ValueError: ``device_placement`` does not have one entry per object.
        """
        if device_placement is None:
            placement = [None] * len(args)
        elif not isinstance(device_placement, (list, tuple)) or len(device_placement) != len(args):
            raise invalid(
                "device_placement", device_placement, f"expected a list of {len(args)} bools"
            )
        else:
            placement = list(device_placement)
        result = list(args)
        for phase in (self._prepare_first, self._prepare_second, self._prepare_third):
            result = [phase(obj, place) for obj, place in zip(result, placement, strict=True)]
        return result[0] if len(result) == 1 else tuple(result)

    def _prepare_first(self, obj: Any, placement: bool | None) -> Any:
        if isinstance(obj, torch.nn.Module):
            return self.prepare_model(obj, device_placement=placement)
        if isinstance(obj, torch.utils.data.DataLoader):
            return self.prepare_data_loader(obj, device_placement=placement)
        return obj

    def _prepare_second(self, obj: Any, placement: bool | None) -> Any:
        if isinstance(obj, torch.optim.Optimizer) and not isinstance(obj, AcceleratedOptimizer):
            return self.prepare_optimizer(obj, device_placement=placement)
        return obj

    def _prepare_third(self, obj: Any, placement: bool | None) -> Any:
        if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            return self.prepare_scheduler(obj)
        return obj

    def prepare_model(
        self,
        model: torch.nn.Module,
        device_placement: bool | None = None,
        evaluation_mode: bool = False,
    ) -> torch.nn.Module:
        """Move ``model`` to the device, add mixed precision, wrap it in DDP across processes.

        Raises:
            TypeError: ``model`` is not an ``nn.Module``.
            ValueError: ``model`` is already wrapped in DistributedDataParallel by the caller,
                or its optimizer was prepared before it.
        """
        if not isinstance(model, torch.nn.Module):
            raise invalid("model", type(model).__name__, "expected a torch.nn.Module", TypeError)
        if any(model is m for m in self._models):
            return model
        if isinstance(model, DistributedDataParallel):
            raise ValueError(
                "model is already wrapped in DistributedDataParallel: pass the plain module to "
                "prepare(), which wraps it (with DistributedDataParallelKwargs for the settings)"
            )
        params = {id(p) for p in model.parameters()}
        for optimizer in self._optimizers:
            if any(id(p) in params for g in optimizer.param_groups for p in g["params"]):
                raise ValueError(
                    "the optimizer of this model was prepared before the model: prepare the "
                    "model first, or both in one call: accelerator.prepare(model, optimizer)"
                )
        check_bool("evaluation_mode", evaluation_mode)
        place = self.device_placement if device_placement is None else device_placement
        if check_bool("device_placement", place):
            model = model.to(self.device)
        if self.state.mixed_precision != "no":
            wrap_forward(model, self.device, self.state.mixed_precision, self.autocast_handler)
        if self.dynamo_backend is not None:
            model = torch.compile(model, backend=self.dynamo_backend)
        trains = any(p.requires_grad for p in model.parameters())
        if self.use_distributed and trains and not evaluation_mode:
            model = self._wrap_ddp(model)
        self._models.append(model)
        return model

    def _wrap_ddp(self, model: torch.nn.Module) -> DistributedDataParallel:
        handler = self.ddp_handler or DistributedDataParallelKwargs()
        device = self.device
        job = PartialState()
        backend = job._backend
        ids = [device.index] if backend.accelerator and device.index is not None else None
        wrapped = DistributedDataParallel(
            model, device_ids=ids, output_device=ids[0] if ids else None, **handler.to_kwargs()
        )
        if handler.comm_hook is DDPCommunicationHookType.NO:
            backend.register_ddp_hook(wrapped, job)  # the device's own, if it has one
        else:
            handler.register_comm_hook(wrapped)
        return wrapped

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        """Wrap ``optimizer`` in an :class:`AcceleratedOptimizer` bound to this job's scaler."""
        if any(optimizer is o or optimizer is o.optimizer for o in self._optimizers):
            raise invalid("optimizer", type(optimizer).__name__, "it is already prepared")
        place = self.device_placement if device_placement is None else device_placement
        prepared = AcceleratedOptimizer(optimizer, device_placement=place, scaler=self.scaler)
        self._optimizers.append(prepared)
        return prepared

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` in an :class:`AcceleratedScheduler` following its optimizer."""
        target = getattr(scheduler, "optimizer", None)
        optimizers = [o for o in self._optimizers if target is o or target is o.optimizer]
        prepared = AcceleratedScheduler(
            scheduler,
            optimizers or self._optimizers,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            split_batches=self.split_batches,
        )
        self._schedulers.append(prepared)
        return prepared

    def prepare_data_loader(
        self,
        data_loader: Any,
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> Any:
        """Shard ``data_loader`` for this process (see :func:`prepare_data_loader`)."""
        place = self.device_placement if device_placement is None else device_placement
        config = self.dataloader_config
        loader = _prepare_data_loader(
            data_loader,
            device=self.device,
            num_processes=self.num_processes,
            process_index=self.process_index,
            split_batches=config.split_batches,
            put_on_device=check_bool("device_placement", place),
            rng_types=list(self.rng_types),
            dispatch_batches=config.dispatch_batches,
            even_batches=config.even_batches,
            slice_fn_for_dispatch=slice_fn_for_dispatch,
            use_seedable_sampler=config.use_seedable_sampler,
            data_seed=config.data_seed,
            non_blocking=config.non_blocking,
            use_stateful_dataloader=config.use_stateful_dataloader,
        )
        loader = make_resumable(loader)
        self._dataloaders.append(loader)
        return loader
