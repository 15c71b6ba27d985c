"""The Accelerator's training step and checkpoint methods, as a mixin.

Kept apart from :mod:`notebook_launcher.accelerator` so that each file stays small.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from .checkpointing import (
    TrainingObjects,
    checkpoint_dirs,
    load_training_state,
    save_training_state,
)
from .ops.saving import _check_path
from .optimizer import AcceleratedOptimizer
from .precision import autocast_context
from .utils.kwargs import AutocastKwargs
from .utils.validation import check_bool, invalid


def _register(hooks: dict[int, Any], hook: Any) -> RemovableHandle:
    if not callable(hook):
        raise invalid("hook", hook, "expected a callable", TypeError)
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def _check_instance(name: str, value: Any, kind: type) -> Any:
    if value is not None and not isinstance(value, kind):
        raise invalid(name, value, f"expected a {kind.__name__} or None", TypeError)
    return value


class AcceleratorTraining:
    """Backward pass, accumulation, clipping, autocast and checkpoints for :class:`Accelerator`."""

    state: Any
    gradient_state: Any
    scaler: Any
    step: int

    # -- training step -----------------------------------------------------------------------

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by the accumulation steps and scaled under fp16."""
        steps = self.gradient_accumulation_steps
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
            gradient_state._set_sync_gradients(True)
        else:
            self.step += 1
            gradient_state._set_sync_gradients(self.step % gradient_state.num_steps == 0)

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """Accumulate gradients: synchronise and step only every ``gradient_accumulation_steps``."""
        self._do_sync()
        sync_each = self.use_distributed and self.gradient_state.plugin_kwargs.get(
            "sync_each_batch", False
        )
        with contextlib.ExitStack() as stack:
            if not (self.sync_gradients or sync_each):
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
        from torch.amp.grad_scaler import OptState

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
        _check_instance("autocast_handler", autocast_handler, AutocastKwargs)
        handler = autocast_handler or self.autocast_handler
        return autocast_context(self.device, self.state.mixed_precision, handler)

    # -- checkpoints -------------------------------------------------------------------------

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` (each with ``state_dict``/``load_state_dict``) too."""
        bad = [
            o for o in objects if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))
        ]
        if bad:
            raise invalid(
                "objects", bad, "each needs state_dict() and load_state_dict()", TypeError
            )
        self._custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` in :meth:`save_state` before it writes.

        ``models`` is a list of the prepared models, ``weights`` the list of their state dicts
        (of the unwrapped models) that will be written as ``model.safetensors``,
        ``model_1.safetensors`` ..., and ``output_dir`` the checkpoint directory (it exists).
        The hook may change ``weights`` in place: replace, edit or remove entries (a model
        saved by the hook itself is removed from it); what is left is written, in order.
        Hooks run on every process, in the order registered.

        Args:
            hook: the callable.

        Returns:
            A ``torch.utils.hooks.RemovableHandle``: ``handle.remove()`` unregisters the hook.

        Raises:
            TypeError: ``hook`` is not callable.

        Example:
            >>> def save_config(models, weights, output_dir):
            ...     json.dump(config, open(os.path.join(output_dir, "config.json"), "w"))
            >>> handle = accelerator.register_save_state_pre_hook(save_config)

        Note:
            Difference from Accelerate: ``models`` is a new list (removing from it does not
            forget a prepared model) and the state dicts have no DistributedDataParallel
            ``module.`` prefix.
        """
        return _register(self._save_model_state_pre_hook, hook)

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` in :meth:`load_state` before it reads the weights.

        ``models`` is a new list of the prepared models; the hook may remove the models it
        loads itself. The models left are filled, in order, from ``model.safetensors``,
        ``model_1.safetensors`` ... (pair it with a save hook that removed the same entries
        from ``weights``). Hooks run on every process, in the order registered.

        Returns a handle and raises as :meth:`register_save_state_pre_hook` does.
        """
        return _register(self._load_model_state_pre_hook, hook)

    def _objects(self) -> TrainingObjects:
        return TrainingObjects(
            self._models,
            self._optimizers,
            self._schedulers,
            self._dataloaders,
            self._custom_objects,
            self.scaler,
            self.step,
            gradients=not self.gradient_state.sync_gradients,
        )

    def save_state(
        self,
        output_dir: str | None = None,
        safe_serialization: bool = True,
        **save_model_func_kwargs: Any,
    ) -> str:
        """Save everything needed to resume exactly: call it on every process.

        Hooks of :meth:`register_save_state_pre_hook` run first, with the models' state dicts.

        Returns:
            The directory written.

        Raises:
            TypeError: ``output_dir`` is not a path.
            ValueError: no ``output_dir`` and no automatic checkpoint naming.
        """
        check_bool("safe_serialization", safe_serialization)
        config = self.project_configuration
        if config.automatic_checkpoint_naming:
            if config.project_dir is None:
                raise ValueError("automatic_checkpoint_naming needs project_dir")
            folder = os.path.join(config.project_dir, "checkpoints")
            output_dir = os.path.join(folder, f"checkpoint_{config.iteration}")
            if self.is_main_process and config.total_limit is not None:
                for old in checkpoint_dirs(config.project_dir)[: -config.total_limit + 1 or None]:
                    shutil.rmtree(old, ignore_errors=True)
        elif output_dir is None:
            raise invalid(
                "output_dir",
                output_dir,
                "pass a directory (or set project_config's automatic_checkpoint_naming)",
            )
        output_dir = _check_path("output_dir", output_dir)
        objects = self._objects()
        if self._save_model_state_pre_hook:
            os.makedirs(output_dir, exist_ok=True)
            objects.weights = [self.get_state_dict(model) for model in self._models]
            for hook in list(self._save_model_state_pre_hook.values()):
                hook(list(self._models), objects.weights, output_dir)
        self.wait_for_everyone()
        path = save_training_state(
            output_dir, objects, safe_serialization, config.save_on_each_node
        )
        config.iteration += 1 if config.automatic_checkpoint_naming else 0
        return path

    def load_state(
        self,
        input_dir: str | None = None,
        load_kwargs: dict | None = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        """Restore what :meth:`save_state` wrote; the next batch is the one after the checkpoint.

        Hooks of :meth:`register_load_state_pre_hook` run first, and choose the models filled.

        Raises:
            TypeError: ``input_dir`` is not a path.
            FileNotFoundError: no checkpoint there.
        """
        config = self.project_configuration
        if input_dir is None:
            found = checkpoint_dirs(config.project_dir) if config.project_dir else []
            if not found:
                raise invalid(
                    "input_dir", input_dir, "no automatic checkpoint found: pass a directory"
                )
            input_dir = found[-1]
            config.iteration = int(os.path.basename(input_dir).split("_")[1]) + 1
        if load_kwargs is not None and not isinstance(load_kwargs, dict):
            raise invalid("load_kwargs", load_kwargs, "expected a dict or None", TypeError)
        input_dir = _check_path("input_dir", input_dir)
        if not os.path.isdir(input_dir):
            raise FileNotFoundError(f"input_dir={input_dir!r} is not a checkpoint directory")
        objects = self._objects()
        if self._load_model_state_pre_hook:
            objects.load_into = list(self._models)
            for hook in list(self._load_model_state_pre_hook.values()):
                hook(objects.load_into, input_dir)
        self.step = load_training_state(input_dir, objects, dict(load_kwargs or {}))
        self.wait_for_everyone()
