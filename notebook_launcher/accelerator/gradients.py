"""The gradient step: backward passes, accumulation and its synchronisation, fp16 loss scaling,
clipping and autocast."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.amp.grad_scaler import OptState

from ..utils.kwargs import AutocastKwargs
from ..utils.validation import invalid
from .arguments import check_instance
from .optimizer import AcceleratedOptimizer
from .precision import autocast_context


class GradientStep:
    """An Accelerator's part that turns losses into gradients and optimizer steps.

    Args:
        state: the job's ``AcceleratorState`` (device, mixed precision, processes).
        gradient_state: the shared ``GradientState`` (accumulation window, loader ends).
        scaler: the fp16 ``GradScaler``, or None.
        optimizers: the prepared optimizers (the Accelerator's list, shared).
        autocast_handler: the ``AutocastKwargs`` of the Accelerator, or None.

    Attributes:
        step: batches into the current accumulation window.
    """

    def __init__(
        self,
        state: Any,
        gradient_state: Any,
        scaler: Any,
        optimizers: list[AcceleratedOptimizer],
        autocast_handler: AutocastKwargs | None,
    ) -> None:
        self.state = state
        self.gradient_state = gradient_state
        self.scaler = scaler
        self._optimizers = optimizers
        self.autocast_handler = autocast_handler
        self.step = 0

    @property
    def use_distributed(self) -> bool:
        return self.state.use_distributed

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by the accumulation steps and scaled under fp16."""
        steps = self.gradient_state.num_steps
        if steps != 1:  # dividing by 1 changes nothing but costs an op and its backward
            loss = loss / steps
        if self.scaler is not None:
            self.scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    def _do_sync(self) -> None:
        gradient_state = self.gradient_state
        if gradient_state.sync_with_dataloader and gradient_state.end_of_dataloader:
            self.step = 0
            gradient_state.set_sync_gradients(True)
        else:
            self.step += 1
            gradient_state.set_sync_gradients(self.step % gradient_state.num_steps == 0)

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """Accumulate gradients: synchronise and step only every ``gradient_accumulation_steps``."""
        self._do_sync()
        sync_each = self.use_distributed and self.gradient_state.plugin_kwargs.get(
            "sync_each_batch", False
        )
        with contextlib.ExitStack() as stack:
            if not (self.gradient_state.sync_gradients or sync_each):
                for model in models:
                    stack.enter_context(self.no_sync(model))
            yield

    @contextlib.contextmanager
    def no_sync(self, model: torch.nn.Module) -> Iterator[None]:
        """Skip the gradient all-reduce of ``model`` in this block (no-op in one process)."""
        if not isinstance(model, torch.nn.Module):
            raise invalid("model", type(model).__name__, "expected a torch.nn.Module", TypeError)
        context = model.no_sync if self.use_distributed and hasattr(model, "no_sync") else None
        with context() if context is not None else contextlib.nullcontext():
            yield

    @staticmethod
    @contextlib.contextmanager
    def trigger_sync_in_backward(model: torch.nn.Module) -> Iterator[None]:
        """Make the next backward pass of ``model`` all-reduce its gradients after ``no_sync``.

        For forward passes run under :meth:`no_sync` whose backward passes run later: the
        backward inside this block synchronises every gradient accumulated so far. A model not
        wrapped in DistributedDataParallel (one process) is left alone.

        Args:
            model: the prepared model.

        Raises:
            TypeError: ``model`` is not an ``nn.Module``.

        Example:
            >>> with accelerator.no_sync(model):
            ...     loss_a, loss_b = loss_fn(model(a)), loss_fn(model(b))
            >>> accelerator.backward(loss_a)  # local only
            >>> with accelerator.trigger_sync_in_backward(model):
            ...     accelerator.backward(loss_b)  # all-reduces the sum of both
        """
        if not isinstance(model, torch.nn.Module):
            raise invalid("model", type(model).__name__, "expected a torch.nn.Module", TypeError)
        if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
            yield
            return
        saved = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])  # what DDP's forward does when it syncs
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = saved

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide the gradients by the fp16 loss scale now (a no-op without fp16 scaling).

        :meth:`clip_grad_norm_` and :meth:`clip_grad_value_` do this themselves; call it to
        inspect or change true gradient values before the optimizer step.

        Args:
            optimizer: an optimizer (prepared or not) or a list of them; default: every
                optimizer prepared by this Accelerator.

        Raises:
            TypeError: ``optimizer`` is not an optimizer, a list of them or None.

        Note:
            Difference from Accelerate: unscaling an optimizer twice before its step is a
            no-op (Accelerate, through ``GradScaler.unscale_``, raises RuntimeError).
        """
        if optimizer is None:
            optimizers = list(self._optimizers)
        else:
            optimizers = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
        inner = []
        for item in optimizers:
            while isinstance(item, AcceleratedOptimizer):
                item = item.optimizer
            if not isinstance(item, torch.optim.Optimizer):
                raise invalid(
                    "optimizer",
                    optimizer,
                    "expected an optimizer, a list of them or None",
                    TypeError,
                )
            inner.append(item)
        if self.scaler is None:
            return
        for item in inner:
            if self.scaler._per_optimizer_states[id(item)]["stage"] is OptState.READY:
                self.scaler.unscale_(item)

    def clip_grad_norm_(
        self, parameters: Any, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """Clip the gradients' total norm (unscaled first under fp16); returns the norm."""
        self.unscale_gradients()
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clip each gradient value to ``[-clip_value, clip_value]`` (unscaled first under fp16)."""
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Any:
        """The autocast region of this Accelerator's mixed precision (no-op for "no")."""
        check_instance("autocast_handler", autocast_handler, AutocastKwargs)
        handler = autocast_handler or self.autocast_handler
        return autocast_context(self.state.device, self.state.mixed_precision, handler)
