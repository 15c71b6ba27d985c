"""Preparing models, optimizers, schedulers and data loaders for the job, with an Accelerator's
settings: device placement, mixed precision, compilation, DistributedDataParallel, sharding."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from ..data import prepare_data_loader as _prepare_data_loader
from ..state import PartialState
from ..utils.kwargs import DDPCommunicationHookType, DistributedDataParallelKwargs
from ..utils.validation import check_bool, invalid
from .optimizer import AcceleratedOptimizer
from .precision import wrap_forward
from .prepared import Prepared
from .scheduler import AcceleratedScheduler


class Preparation:
    """An Accelerator's part that prepares the objects of a training loop and keeps them.

    Args:
        accelerator: the Accelerator whose settings apply (read at each call, so a setting
            changed on the Accelerator applies to what is prepared next).
        prepared: where the prepared objects are kept (shared with the other parts).
    """

    def __init__(self, accelerator: Any, prepared: Prepared) -> None:
        self.accelerator = accelerator
        self.prepared = prepared

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
        if any(model is m for m in self.prepared.models):
            return model
        if isinstance(model, DistributedDataParallel):
            raise ValueError(
                "model is already wrapped in DistributedDataParallel: pass the plain module to "
                "prepare(), which wraps it (with DistributedDataParallelKwargs for the settings)"
            )
        params = {id(p) for p in model.parameters()}
        for optimizer in self.prepared.optimizers:
            if any(id(p) in params for g in optimizer.param_groups for p in g["params"]):
                raise ValueError(
                    "the optimizer of this model was prepared before the model: prepare the "
                    "model first, or both in one call: accelerator.prepare(model, optimizer)"
                )
        check_bool("evaluation_mode", evaluation_mode)
        place = self.accelerator.device_placement if device_placement is None else device_placement
        if check_bool("device_placement", place):
            model = model.to(self.accelerator.device)
        if self.accelerator.state.mixed_precision != "no":
            wrap_forward(
                model,
                self.accelerator.device,
                self.accelerator.state.mixed_precision,
                self.accelerator.autocast_handler,
            )
        if self.accelerator.dynamo_backend is not None:
            model = torch.compile(model, backend=self.accelerator.dynamo_backend)
        trains = any(p.requires_grad for p in model.parameters())
        if self.accelerator.use_distributed and trains and not evaluation_mode:
            model = self._wrap_ddp(model)
        self.prepared.models.append(model)
        return model

    def _wrap_ddp(self, model: torch.nn.Module) -> DistributedDataParallel:
        handler = self.accelerator.ddp_handler or DistributedDataParallelKwargs()
        device = self.accelerator.device
        job = PartialState()
        backend = job.device_backend
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
        if any(optimizer is o or optimizer is o.optimizer for o in self.prepared.optimizers):
            raise invalid("optimizer", type(optimizer).__name__, "it is already prepared")
        place = self.accelerator.device_placement if device_placement is None else device_placement
        prepared = AcceleratedOptimizer(
            optimizer, device_placement=place, scaler=self.accelerator.scaler
        )
        self.prepared.optimizers.append(prepared)
        return prepared

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` in an :class:`AcceleratedScheduler` following its optimizer."""
        target = getattr(scheduler, "optimizer", None)
        optimizers = [o for o in self.prepared.optimizers if target is o or target is o.optimizer]
        prepared = AcceleratedScheduler(
            scheduler,
            optimizers or self.prepared.optimizers,
            step_with_optimizer=self.accelerator.step_scheduler_with_optimizer,
            split_batches=self.accelerator.split_batches,
        )
        self.prepared.schedulers.append(prepared)
        return prepared

    def prepare_data_loader(
        self,
        data_loader: Any,
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> Any:
        """Shard ``data_loader`` for this process (see :func:`prepare_data_loader`)."""
        place = self.accelerator.device_placement if device_placement is None else device_placement
        config = self.accelerator.dataloader_config
        loader = _prepare_data_loader(
            data_loader,
            device=self.accelerator.device,
            num_processes=self.accelerator.num_processes,
            process_index=self.accelerator.process_index,
            split_batches=config.split_batches,
            put_on_device=check_bool("device_placement", place),
            rng_types=list(self.accelerator.rng_types),
            dispatch_batches=config.dispatch_batches,
            even_batches=config.even_batches,
            slice_fn_for_dispatch=slice_fn_for_dispatch,
            use_seedable_sampler=config.use_seedable_sampler,
            data_seed=config.data_seed,
            non_blocking=config.non_blocking,
            use_stateful_dataloader=config.use_stateful_dataloader,
        )
        self.prepared.dataloaders.append(loader)
        return loader
