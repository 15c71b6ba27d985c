"""Checkpoints and saved models: what an Accelerator writes to resume a run, or to share a model."""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from .. import ops
from ..utils.validation import check_bool, check_path, invalid
from .configurations import ProjectConfiguration
from .files import (
    TrainingObjects,
    checkpoint_dirs,
    load_training_state,
    parse_shard_size,
    save_model_files,
    save_training_state,
)
from .gradients import GradientStep
from .prepared import Prepared


def _register(hooks: dict[int, Any], hook: Any) -> RemovableHandle:
    if not callable(hook):
        raise invalid("hook", hook, "expected a callable", TypeError)
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


class Checkpoints:
    """An Accelerator's part that saves and restores its training state and saves models.

    Args:
        state: the job's ``AcceleratorState``.
        prepared: the objects the Accelerator prepared (shared).
        gradients: its gradient step (the scaler and the accumulation step are saved too).
        project_configuration: where checkpoints go and how they are named.
        exact_resume: whether checkpoints resume exactly where the run stood (asked at each
            save and load: the Accelerator's ``use_stateful_dataloader``).
    """

    def __init__(
        self,
        state: Any,
        prepared: Prepared,
        gradients: GradientStep,
        project_configuration: ProjectConfiguration,
        exact_resume: Callable[[], bool] = lambda: False,
    ) -> None:
        self.state = state
        self.prepared = prepared
        self.gradients = gradients
        self.project_configuration = project_configuration
        self.exact_resume = exact_resume
        self._save_hooks: OrderedDict[int, Any] = OrderedDict()
        self._load_hooks: OrderedDict[int, Any] = OrderedDict()

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` (each with ``state_dict``/``load_state_dict``) too."""
        bad = [
            o for o in objects if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))
        ]
        if bad:
            raise invalid(
                "objects", bad, "each needs state_dict() and load_state_dict()", TypeError
            )
        self.prepared.custom_objects.extend(objects)

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
            forget a prepared model). The state dicts are those of the models inside the
            DistributedDataParallel and compile wrappers, as in Accelerate.
        """
        return _register(self._save_hooks, hook)

    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` in :meth:`load_state` before it reads the weights.

        ``models`` is a new list of the prepared models; the hook may remove the models it
        loads itself. The models left are filled, in order, from ``model.safetensors``,
        ``model_1.safetensors`` ... (pair it with a save hook that removed the same entries
        from ``weights``). Hooks run on every process, in the order registered.

        Returns a handle and raises as :meth:`register_save_state_pre_hook` does.
        """
        return _register(self._load_hooks, hook)

    def _objects(self) -> TrainingObjects:
        step = self.gradients
        exact = bool(self.exact_resume())
        return TrainingObjects(
            self.prepared,
            step.scaler,
            step.step,
            exact=exact,
            gradients=exact and not step.gradient_state.sync_gradients,
        )

    def save_state(
        self,
        output_dir: str | None = None,
        safe_serialization: bool = True,
        **save_model_func_kwargs: Any,
    ) -> str:
        """Save the training state (models, optimizers, schedulers, scaler, registered objects,
        random states): call it on every process.

        Hooks of :meth:`register_save_state_pre_hook` run first, with the models' state dicts.
        The directory holds the files Accelerate's ``save_state`` writes, so Accelerate's
        ``load_state`` reads it (and :meth:`load_state` reads Accelerate's).

        As in Accelerate, a prepared loader's position in its epoch is saved only with
        ``DataLoaderConfiguration(use_stateful_dataloader=True)``: then torchdata's state of
        each loader goes to ``dl_state_dict.bin`` (``dl_state_dict_1.bin`` ...), and
        ``load_state`` resumes the loader at the batch after the one in use. Without it, the
        code that resumes skips the batches already seen itself (``skip_first_batches``).

        Args:
            output_dir: the directory (None with automatic checkpoint naming).
            safe_serialization: write the models as safetensors rather than pickles.
            **save_model_func_kwargs: accepted as Accelerate accepts them; Accelerate hands
                them to DeepSpeed's ``save_checkpoint`` only, which has no counterpart in a
                data-parallel job, so here, as in Accelerate's DDP jobs, nothing uses them.

        Returns:
            The directory written.

        Raises:
            TypeError: ``output_dir`` is not a path.
            ValueError: no ``output_dir`` and no automatic checkpoint naming.

        Note:
            Differences from Accelerate with ``use_stateful_dataloader=True`` (without it, the
            files and their contents are Accelerate's): ``dl_state_dict.bin`` is written by
            the main process alone (Accelerate has every process write it, and the other
            processes of a ``DataLoaderDispatcher`` hold no position); each process's
            ``random_states_<rank>.pkl`` also holds, under ``"dataloader_states"``, its loaders'
            full states: the random states at the start of the epoch, so that the resumed
            epoch draws the order of the uninterrupted one (Accelerate's draws it again from
            the states at the save), and the samples a dispatcher completes its last batch
            with; a checkpoint saved inside a gradient accumulation window also holds the
            gradients accumulated so far (``gradients_<rank>.bin``). Accelerate's
            ``load_state`` ignores these.
        """
        check_bool("safe_serialization", safe_serialization)
        config = self.project_configuration
        if config.automatic_checkpoint_naming:
            if config.project_dir is None:
                raise ValueError("automatic_checkpoint_naming needs project_dir")
            folder = os.path.join(config.project_dir, "checkpoints")
            output_dir = os.path.join(folder, f"checkpoint_{config.iteration}")
            if self.state.is_main_process and config.total_limit is not None:
                for old in checkpoint_dirs(config.project_dir)[: -config.total_limit + 1 or None]:
                    shutil.rmtree(old, ignore_errors=True)
        elif output_dir is None:
            raise invalid(
                "output_dir",
                output_dir,
                "pass a directory (or set project_config's automatic_checkpoint_naming)",
            )
        output_dir = check_path("output_dir", output_dir)
        objects = self._objects()
        models = self.prepared.models
        if self._save_hooks:
            os.makedirs(output_dir, exist_ok=True)
            objects.weights = [  # as written without hooks: the models inside the wrappers
                ops.extract_model_from_parallel(model, keep_torch_compile=False).state_dict()
                for model in models
            ]
            for hook in list(self._save_hooks.values()):
                hook(list(models), objects.weights, output_dir)
        self.state.wait_for_everyone()
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
        """Restore what :meth:`save_state` wrote.

        Hooks of :meth:`register_load_state_pre_hook` run first, and choose the models filled.
        A checkpoint written by Accelerate's ``save_state`` loads too. As in Accelerate, the
        prepared loaders are moved to the saved position only with
        ``use_stateful_dataloader=True`` (their next batch is then the one after the
        checkpoint's); otherwise they are left where they are.

        Args:
            input_dir: the directory (None: the latest automatic checkpoint).
            load_kwargs: passed to ``torch.load`` for the optimizer and scheduler states.
            **load_model_func_kwargs: passed to each model's ``load_state_dict`` (``strict=False``
                loads the keys that match), except ``map_location``: "cpu" or "on_device", where
                the optimizer states are loaded (default: the process's device).

        Raises:
            TypeError: ``input_dir`` is not a path, or an unknown keyword.
            FileNotFoundError: no checkpoint there.
            RuntimeError: the weights do not fit the model (missing or unexpected keys).
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
        input_dir = check_path("input_dir", input_dir)
        if not os.path.isdir(input_dir):
            raise FileNotFoundError(f"input_dir={input_dir!r} is not a checkpoint directory")
        objects = self._objects()
        if self._load_hooks:
            objects.load_into = list(self.prepared.models)
            for hook in list(self._load_hooks.values()):
                hook(objects.load_into, input_dir)
        self.gradients.step = load_training_state(
            input_dir, objects, dict(load_kwargs or {}), load_model_func_kwargs
        )
        self.state.wait_for_everyone()

    def unwrap_model(
        self, model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> torch.nn.Module:
        """The user's model inside the DDP (and compile) wrappers ``prepare`` added."""
        return ops.extract_model_from_parallel(
            model, keep_fp32_wrapper=keep_fp32_wrapper, keep_torch_compile=keep_torch_compile
        )

    def get_state_dict(self, model: Any, unwrap: bool = True) -> dict[str, Any]:
        """The model's state dict (of the unwrapped model by default)."""
        check_bool("unwrap", unwrap)
        return (self.unwrap_model(model) if unwrap else model).state_dict()

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """Save ``obj`` once (on the main process, or each node's with ``save_on_each_node``)."""
        ops.save(
            obj,
            f,
            save_on_each_node=self.project_configuration.save_on_each_node,
            safe_serialization=safe_serialization,
        )

    def save_model(
        self,
        model: torch.nn.Module,
        save_directory: str | os.PathLike,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Write the weights of ``model`` (unwrapped) into ``save_directory``, once per job.

        One file, ``model.safetensors`` (``pytorch_model.bin`` without ``safe_serialization``),
        or, when the weights exceed ``max_shard_size``, shards
        ``model-00001-of-00002.safetensors`` ... with ``model.safetensors.index.json``
        (``pytorch_model.bin.index.json``) giving ``{"metadata": {"total_size": bytes},
        "weight_map": {name: file}}``: the layout ``transformers`` and Accelerate's loaders
        read. Shards and an index left by an earlier save into the directory are removed.
        Only the main process writes (each node's with ``save_on_each_node``); no process
        waits for the others, so call :meth:`wait_for_everyone` before reading the files.

        Args:
            model: the model, prepared or not.
            save_directory: the folder (created if needed).
            max_shard_size: the most bytes of tensors in one file: an int, or a string such as
                "10GB" or "500MB" (KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: of 1024).
            safe_serialization: write safetensors files rather than pickles.

        Raises:
            TypeError: ``model`` is not an ``nn.Module``, or an argument of the wrong type.
            ValueError: a ``max_shard_size`` that is not a positive size.
            NotADirectoryError: ``save_directory`` is an existing file.
            RuntimeError: a parameter of ``model`` is on the meta device.

        Example:
            >>> accelerator.wait_for_everyone()
            >>> accelerator.save_model(model, "trained", max_shard_size="1GB")

        Note:
            Differences from Accelerate: a ``save_directory`` that is a file raises instead of
            logging an error; with safetensors, tensors that share memory (tied weights) are
            all written, each as its own copy (Accelerate keeps one name and drops the others),
            so the file reloads with ``load_state_dict(strict=True)``; tensors sharing memory
            may go to different shards; a stale whole-model file or index is removed too.
        """
        if not isinstance(model, torch.nn.Module):
            raise invalid("model", type(model).__name__, "expected a torch.nn.Module", TypeError)
        directory = check_path("save_directory", save_directory)
        max_bytes = parse_shard_size(max_shard_size)
        check_bool("safe_serialization", safe_serialization)
        if os.path.isfile(directory):
            raise invalid(
                "save_directory",
                directory,
                "it is a file; expected a directory",
                NotADirectoryError,
            )
        inner = self.unwrap_model(model)
        meta = [name for name, p in inner.named_parameters() if p.device.type == "meta"]
        if meta:
            raise RuntimeError(
                f"model cannot be saved: parameter {meta[0]!r} (and {len(meta) - 1} more) is on "
                "the meta device, with no values; load or materialise the weights first"
            )
        save_model_files(
            inner.state_dict(),
            directory,
            max_bytes,
            safe_serialization,
            self.project_configuration.save_on_each_node,
        )
