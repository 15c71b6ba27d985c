"""The Accelerator's process helpers, collectives, trackers and profiler, as a mixin.

Kept apart from :mod:`notebook_launcher.accelerator` so that each file stays small; every method
here only reads ``self.state``, ``self.gradient_state`` and the Accelerator's settings.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import ops
from .checkpointing import parse_shard_size, save_model_files
from .data import skip_first_batches as _skip_first_batches
from .ops.saving import _check_path
from .resumable import make_resumable
from .trackers import GeneralTracker, build_tracker
from .utils.enums import DistributedType
from .utils.profiling import ProfileKwargs
from .utils.validation import check_bool, invalid

PROFILE_FILE = "profile_{}.json"


def _all_tensors(data: Any) -> bool:
    try:
        ops.recursively_apply(lambda x: x, data, error_on_other_type=True)
    except TypeError:
        return False
    return True


class AcceleratorHelpers:
    """Collectives, process control, trackers and profiling for :class:`Accelerator`."""

    state: Any
    gradient_state: Any

    # -- collectives -------------------------------------------------------------------------

    def gather(self, tensor: Any) -> Any:
        """Gather tensors (nested structures too) from every process, concatenated on dim 0."""
        return ops.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather predictions or labels for a metric, dropping the duplicates of an uneven end.

        On the last batch of a prepared loader the samples added to even out the processes'
        shares are cut off, so every sample of the dataset is counted once (also after
        ``skip_first_batches``).

        Args:
            input_data: tensors (nested structures too), or any picklable objects.
            use_gather_object: gather with ``gather_object`` (default for non-tensors).

        Returns:
            The gathered data, without the padding of the last batch.
        """
        check_bool("use_gather_object", use_gather_object)
        use_gather_object = use_gather_object or not _all_tensors(input_data)
        data = ops.gather_object(input_data) if use_gather_object else ops.gather(input_data)
        gradient_state = self.gradient_state
        if not gradient_state.end_of_dataloader:
            return data
        remainder = gradient_state.remainder
        if remainder <= 0:
            return data
        if use_gather_object:
            return data[:remainder]
        return ops.recursively_apply(lambda t: t[:remainder], data)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Reduce tensors over processes: "sum" (the default, as in Accelerate), "mean", "none"."""
        return ops.reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """Pad tensors along ``dim`` to the largest size on any process."""
        return ops.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def split_between_processes(
        self, inputs: Any, apply_padding: bool = False
    ) -> contextlib.AbstractContextManager:
        """Context manager giving this process its share of ``inputs``."""
        return self.state.split_between_processes(inputs, apply_padding=apply_padding)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call."""
        self.state.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        self.state.print(*args, **kwargs)

    # -- process control ---------------------------------------------------------------------

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Decorator: run ``function`` on the main process only."""
        return self.state.on_main_process(function)

    def on_local_main_process(
        self, function: Callable[..., Any] | None = None
    ) -> Callable[..., Any]:
        """Decorator: run ``function`` on each node's main process only."""
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run ``function`` on the last process only."""
        return self.state.on_last_process(function)

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Callable[..., Any]:
        """Decorator: run ``function`` on the process of global index ``process_index`` only."""
        return self.state.on_process(function, process_index=process_index)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Callable[..., Any]:
        """Decorator: run ``function`` on the process of that index on each node only."""
        return self.state.on_local_process(function, local_process_index=local_process_index)

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others."""
        with self.state.main_process_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each node's main process first, then on the others."""
        with self.state.local_main_process_first():
            yield

    # -- models, memory, files ---------------------------------------------------------------

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
        directory = _check_path("save_directory", save_directory)
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

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object, collect garbage and empty the device cache.

        Returns:
            A list of as many Nones as ``objects`` (assign it back to drop your references).
        """
        for name in ("_models", "_optimizers", "_schedulers", "_dataloaders", "_custom_objects"):
            getattr(self, name).clear()
        self.scaler = None
        gc.collect()
        empty_cache = getattr(getattr(torch, self.device.type, None), "empty_cache", None)
        if callable(empty_cache) and self.device.type != "cpu":
            empty_cache()
        return [None for _ in objects]

    clear = free_memory

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader like ``dataloader`` that starts after its first ``num_batches`` batches."""
        return make_resumable(_skip_first_batches(dataloader, num_batches))

    # -- trackers ----------------------------------------------------------------------------

    def init_trackers(
        self, project_name: str, config: dict | None = None, init_kwargs: dict | None = None
    ) -> None:
        """Start a run on every tracker of ``log_with``.

        Args:
            project_name: the name of the run (TensorBoard's sub-directory).
            config: hyperparameters to record.
            init_kwargs: per-tracker constructor arguments, ``{"tensorboard": {...}}``.

        Raises:
            TypeError: an argument of the wrong type.
        """
        if not isinstance(project_name, str):
            raise invalid("project_name", project_name, "expected a str", TypeError)
        if config is not None and not isinstance(config, dict):
            raise invalid("config", config, "expected a dict or None", TypeError)
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise invalid("init_kwargs", init_kwargs, "expected a dict or None", TypeError)
        init_kwargs = init_kwargs or {}
        main = self.state.is_main_process
        for entry in self.log_with:
            name = entry.name if isinstance(entry, GeneralTracker) else entry
            tracker_cls = type(entry) if isinstance(entry, GeneralTracker) else None
            if tracker_cls is None:
                from .trackers import BUILT_IN

                tracker_cls = BUILT_IN[entry]
            if tracker_cls.main_process_only and not main:
                continue
            tracker = build_tracker(
                entry, project_name, self.logging_dir, init_kwargs.get(name, {})
            )
            self.trackers.append(tracker)
        for tracker in self.trackers:
            tracker.start()
            if config is not None:
                tracker.store_init_configuration(config)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The started tracker called ``name`` (its run object with ``unwrap``).

        Raises:
            ValueError: no tracker of that name was started on this process.
        """
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        if not self.state.is_main_process:
            return GeneralTracker(_blank=True)
        started = ", ".join(repr(t.name) for t in self.trackers) or "none"
        raise invalid("name", name, f"started trackers: {started}")

    def log(self, values: dict, step: int | None = None, log_kwargs: dict | None = None) -> None:
        """Send ``values`` to every started tracker (per-tracker ``log_kwargs`` by name).

        Raises:
            TypeError: ``values`` is not a dict or ``step`` not an int.
        """
        if not isinstance(values, dict):
            raise invalid("values", values, "expected a dict of names to values", TypeError)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise invalid("step", step, "expected an int or None", TypeError)
        log_kwargs = log_kwargs or {}
        for tracker in self.trackers:
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))

    def end_training(self) -> None:
        """Finish every tracker's run and wait for every process."""
        for tracker in self.trackers:
            tracker.finish()
        self.trackers = []
        self.wait_for_everyone()

    # -- profiling ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Profile the block with ``torch.profiler``; yields the profiler.

        With ``output_trace_dir`` set, each process writes ``profile_<rank>.json`` there.

        Raises:
            TypeError: ``profile_handler`` is not a ProfileKwargs.
        """
        if profile_handler is not None and not isinstance(profile_handler, ProfileKwargs):
            raise invalid(
                "profile_handler", profile_handler, "expected a ProfileKwargs or None", TypeError
            )
        handler = profile_handler or self.profile_handler or ProfileKwargs()
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir is not None:
            os.makedirs(handler.output_trace_dir, exist_ok=True)
            name = PROFILE_FILE.format(self.state.process_index)
            profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, name))
        self.wait_for_everyone()

    @property
    def multi_device(self) -> bool:
        """Whether this is a data-parallel job over several devices (or CPU processes)."""
        return self.state.distributed_type is not DistributedType.NO
