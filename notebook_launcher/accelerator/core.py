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

import functools
import gc
import os
from collections.abc import Callable
from typing import Any

import torch

from ..data import skip_first_batches as _skip_first_batches
from ..state import AcceleratorState, GradientState
from ..utils.dataclasses import GradientAccumulationPlugin
from ..utils.enums import DistributedType
from ..utils.validation import check_bool, check_int, invalid
from .arguments import (
    accelerator_rng_types,
    accumulation_plugin,
    check_dynamo,
    check_instance,
    read_handlers,
)
from .checkpoints import Checkpoints
from .configurations import DataLoaderConfiguration, ProjectConfiguration
from .gradients import GradientStep
from .precision import check_autocast, make_scaler
from .preparation import Preparation
from .prepared import Prepared
from .processes import Processes
from .trackers import Trackers, add_notebook_tracker, resolve_trackers


def _delegate(part: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """An Accelerator method that runs ``method`` on the Accelerator's part ``part``: the
    Accelerator's public interface is its parts' methods, with their signatures and docs."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, part), name)(*args, **kwargs)

    call.__qualname__ = f"Accelerator.{name}"
    return call


def _held(part: str, name: str, doc: str) -> property:
    """An Accelerator attribute kept by its part ``part`` as ``name``."""
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, value: setattr(getattr(self, part), name, value),
        doc=doc,
    )


class Accelerator:
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
        log_with: tracker names ("notebook", "tensorboard", "wandb", "mlflow", "all") or
            tracker objects (``GeneralTracker``s, this package's or Accelerate's). In a
            launched worker the notebook tracker is added (the live panels' charts).
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
        start on every process (each decides: TensorBoard, W&B and MLflow write from the main
        process, the notebook tracker logs every rank; Accelerate's tracker objects and classes
        run on the main process only, as in Accelerate); tracker names without an adapter here
        are refused when the Accelerator is created; ``fp16`` on a device that cannot autocast to it
        fails at construction rather than silently running in full precision; with
        ``use_stateful_dataloader=True``, ``save_state``/``load_state`` resume exactly where
        the run stood (see :meth:`save_state`); without it, as in Accelerate, a prepared
        loader's position is not saved (skip the batches already seen with
        ``skip_first_batches``).
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
        for attribute, handler in read_handlers(kwargs_handlers).items():
            setattr(self, attribute, handler)
        self.dataloader_config = check_instance(
            "dataloader_config", dataloader_config, DataLoaderConfiguration
        ) or DataLoaderConfiguration(split_batches=split_batches)
        if split_batches:
            self.dataloader_config.split_batches = True
        self.project_configuration = (
            check_instance("project_config", project_config, ProjectConfiguration)
            or ProjectConfiguration()
        )
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        self.dynamo_backend = check_dynamo(dynamo_backend)
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
            accumulation_plugin(gradient_accumulation_steps, gradient_accumulation_plugin)
        )
        self.rng_types = accelerator_rng_types(rng_types)
        self.log_with = add_notebook_tracker(resolve_trackers(log_with, self.logging_dir))
        # The parts, each with one job, sharing what was prepared.
        self._prepared = Prepared()
        scaler = make_scaler(self.device, self.state.mixed_precision, self.scaler_handler)
        self._gradients = GradientStep(
            self.state,
            self.gradient_state,
            scaler,
            self._prepared.optimizers,
            self.autocast_handler,
        )
        self._processes = Processes(
            self.state, self.gradient_state, self._prepared, self.dataloader_config
        )
        self._checkpoints = Checkpoints(
            self.state,
            self._prepared,
            self._gradients,
            self.project_configuration,
            exact_resume=lambda: self.use_stateful_dataloader,
        )
        self._trackers = Trackers(
            self.state, self.log_with, self.project_configuration, self.profile_handler
        )
        self._preparation = Preparation(self, self._prepared)

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
        self.gradient_state.set_sync_gradients(value)

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
        return any(opt.step_was_skipped for opt in self._prepared.optimizers)

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object, collect garbage and empty the device cache.

        Returns:
            A list of as many Nones as ``objects`` (assign it back to drop your references).
        """
        self._prepared.clear()
        self._gradients.scaler = None
        gc.collect()
        empty_cache = getattr(getattr(torch, self.device.type, None), "empty_cache", None)
        if callable(empty_cache) and self.device.type != "cpu":
            empty_cache()
        return [None for _ in objects]

    clear = free_memory

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader like ``dataloader`` that starts after its first ``num_batches`` batches."""
        return _skip_first_batches(dataloader, num_batches)

    @property
    def multi_device(self) -> bool:
        """Whether this is a data-parallel job over several devices (or CPU processes)."""
        return self.state.distributed_type is not DistributedType.NO

    @property
    def native_amp(self) -> bool:
        """Whether torch's own mixed precision (autocast, and a GradScaler for fp16) is on."""
        return self.state.mixed_precision in ("fp16", "bf16")

    @property
    def use_stateful_dataloader(self) -> bool:
        """Whether prepared loaders are built on torchdata's ``StatefulDataLoader``."""
        return bool(self.dataloader_config.use_stateful_dataloader)

    @property
    def should_save_model(self) -> bool:
        """Whether this process holds a whole copy of the model to save (each node's main)."""
        return self.state.is_local_main_process

    deepspeed_plugin = property(lambda self: None, doc="Always None: DeepSpeed is out of scope.")
    parallelism_config = property(lambda self: None, doc="Always None: data parallelism only.")
    torch_device_mesh = property(lambda self: None, doc="Always None: no device mesh is built.")
    is_fsdp2 = property(lambda self: False, doc="Always False: FSDP is out of scope.")
    is_composable_parallelism_enabled = property(
        lambda self: False,
        doc="Always False: FSDP2 and its composable parallelism are out of scope.",
    )

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """Whether ``model`` (or a submodule) is spread over several devices by a device map.

        True when a module has an ``hf_device_map`` of more than one entry (a model loaded with
        ``device_map="auto"``); such a model cannot be trained data-parallel.

        Raises:
            TypeError: ``model`` is not an ``nn.Module``.
        """
        if not isinstance(model, torch.nn.Module):
            raise invalid("model", type(model).__name__, "expected a torch.nn.Module", TypeError)
        return any(len(getattr(m, "hf_device_map", None) or ()) > 1 for m in model.modules())

    # -- the parts' methods, by job ----------------------------------------------------------

    # Preparing the training loop's objects (Preparation).
    prepare = _delegate("_preparation", Preparation.prepare)
    prepare_model = _delegate("_preparation", Preparation.prepare_model)
    prepare_optimizer = _delegate("_preparation", Preparation.prepare_optimizer)
    prepare_scheduler = _delegate("_preparation", Preparation.prepare_scheduler)
    prepare_data_loader = _delegate("_preparation", Preparation.prepare_data_loader)

    # The gradient step (GradientStep).
    backward = _delegate("_gradients", GradientStep.backward)
    accumulate = _delegate("_gradients", GradientStep.accumulate)
    no_sync = _delegate("_gradients", GradientStep.no_sync)
    trigger_sync_in_backward = staticmethod(GradientStep.trigger_sync_in_backward)
    unscale_gradients = _delegate("_gradients", GradientStep.unscale_gradients)
    clip_grad_norm_ = _delegate("_gradients", GradientStep.clip_grad_norm_)
    clip_grad_value_ = _delegate("_gradients", GradientStep.clip_grad_value_)
    autocast = _delegate("_gradients", GradientStep.autocast)

    # The other processes (Processes).
    gather = _delegate("_processes", Processes.gather)
    gather_for_metrics = _delegate("_processes", Processes.gather_for_metrics)
    reduce = _delegate("_processes", Processes.reduce)
    pad_across_processes = _delegate("_processes", Processes.pad_across_processes)
    split_between_processes = _delegate("_processes", Processes.split_between_processes)
    wait_for_everyone = _delegate("_processes", Processes.wait_for_everyone)
    print = _delegate("_processes", Processes.print)
    on_main_process = _delegate("_processes", Processes.on_main_process)
    on_local_main_process = _delegate("_processes", Processes.on_local_main_process)
    on_last_process = _delegate("_processes", Processes.on_last_process)
    on_process = _delegate("_processes", Processes.on_process)
    on_local_process = _delegate("_processes", Processes.on_local_process)
    main_process_first = _delegate("_processes", Processes.main_process_first)
    local_main_process_first = _delegate("_processes", Processes.local_main_process_first)
    join_uneven_inputs = _delegate("_processes", Processes.join_uneven_inputs)
    set_trigger = _delegate("_processes", Processes.set_trigger)
    check_trigger = _delegate("_processes", Processes.check_trigger)

    # Checkpoints and saved models (Checkpoints).
    register_for_checkpointing = _delegate("_checkpoints", Checkpoints.register_for_checkpointing)
    register_save_state_pre_hook = _delegate(
        "_checkpoints", Checkpoints.register_save_state_pre_hook
    )
    register_load_state_pre_hook = _delegate(
        "_checkpoints", Checkpoints.register_load_state_pre_hook
    )
    save_state = _delegate("_checkpoints", Checkpoints.save_state)
    load_state = _delegate("_checkpoints", Checkpoints.load_state)
    unwrap_model = _delegate("_checkpoints", Checkpoints.unwrap_model)
    get_state_dict = _delegate("_checkpoints", Checkpoints.get_state_dict)
    save = _delegate("_checkpoints", Checkpoints.save)
    save_model = _delegate("_checkpoints", Checkpoints.save_model)

    # Trackers and the profiler (Trackers).
    init_trackers = _delegate("_trackers", Trackers.init_trackers)
    get_tracker = _delegate("_trackers", Trackers.get_tracker)
    log = _delegate("_trackers", Trackers.log)
    end_training = _delegate("_trackers", Trackers.end_training)
    profile = _delegate("_trackers", Trackers.profile)

    # What the parts hold, read and written as the Accelerator's own attributes.
    scaler = _held("_gradients", "scaler", "The fp16 GradScaler, or None (no fp16).")
    step = _held("_gradients", "step", "Batches into the current accumulation window.")
    trackers = _held("_trackers", "trackers", "The trackers started on this process.")
    flag_tensor = _held("_processes", "flag_tensor", "This process's trigger flag, or None.")
