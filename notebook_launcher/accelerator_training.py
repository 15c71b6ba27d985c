"""The Accelerator's training step and checkpoint methods, as a mixin.

Kept apart from :mod:`notebook_launcher.accelerator` so that each file stays small.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import torch

from .checkpointing import (
    TrainingObjects,
    checkpoint_dirs,
    load_training_state,
    save_training_state,
)
from .kwargs import AutocastKwargs
from .precision import autocast_context
from .utils.validation import check_bool, invalid


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

    def _unscale(self) -> None:
        if self.scaler is None:
            return
        from torch.amp.grad_scaler import OptState

        for optimizer in self._optimizers:
            stage = self.scaler._per_optimizer_states[id(optimizer.optimizer)]["stage"]
            if stage is OptState.READY:
                self.scaler.unscale_(optimizer.optimizer)

    def clip_grad_norm_(
        self, parameters: Any, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """Clip the gradients' total norm (unscaled first under fp16); returns the norm."""
        self._unscale()
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clip each gradient value to ``[-clip_value, clip_value]`` (unscaled first under fp16)."""
        self._unscale()
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

        Returns:
            The directory written.

        Raises:
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
        self.wait_for_everyone()
        path = save_training_state(
            os.fspath(output_dir), self._objects(), safe_serialization, config.save_on_each_node
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

        Raises:
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
        self.step = load_training_state(
            os.fspath(input_dir), self._objects(), dict(load_kwargs or {})
        )
        self.wait_for_everyone()
