"""Working with the other processes of the job: collectives, code run on chosen processes,
uneven inputs and cross-process triggers."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import ops
from ..data.loaders import find_shard, index_batches
from ..utils.enums import DistributedType
from ..utils.validation import check_bool, check_optional_bool, invalid
from .configurations import DataLoaderConfiguration
from .prepared import Prepared


def _all_tensors(data: Any) -> bool:
    try:
        ops.recursively_apply(lambda x: x, data, error_on_other_type=True)
    except TypeError:
        return False
    return True


class Processes:
    """An Accelerator's part that reaches across processes.

    Args:
        state: the job's ``AcceleratorState``.
        gradient_state: the shared ``GradientState`` (where the loaders are in their data).
        prepared: the objects the Accelerator prepared (its loaders, for joins).
        dataloader_config: the Accelerator's ``DataLoaderConfiguration``.

    Attributes:
        flag_tensor: this process's trigger flag (see :meth:`set_trigger`), or None.
    """

    def __init__(
        self,
        state: Any,
        gradient_state: Any,
        prepared: Prepared,
        dataloader_config: DataLoaderConfiguration,
    ) -> None:
        self.state = state
        self.gradient_state = gradient_state
        self.prepared = prepared
        self.dataloader_config = dataloader_config
        self.flag_tensor: torch.Tensor | None = None

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

    @contextlib.contextmanager
    def join_uneven_inputs(
        self, joinables: Any, even_batches: bool | None = None
    ) -> Iterator[None]:
        """Let processes that run out of batches early wait for the others instead of hanging.

        Wraps the block in ``torch.distributed.algorithms.Join``: a process whose loader is
        exhausted keeps answering the others' gradient all-reduces (with zeros) until every
        process is done, then the models are synchronised. Join is enabled when the loaders
        give uneven batches (``even_batches`` False, here or in the Accelerator's
        ``DataLoaderConfiguration``).

        Args:
            joinables: a list of ``torch.distributed.algorithms.Joinable`` objects, usually
                the prepared (DistributedDataParallel) model.
            even_batches: for the duration of the block, the ``even_batches`` of every prepared
                map-style loader (None: leave them as prepared). Loaders over iterable
                datasets keep theirs, with a warning.

        Raises:
            TypeError: ``joinables`` is not a list or tuple (of ``Joinable`` objects in a
                multi-process job), or ``even_batches`` is not a bool or None.

        Example:
            >>> model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            >>> with accelerator.join_uneven_inputs([model], even_batches=False):
            ...     for x, y in loader:
            ...         accelerator.backward(loss_fn(model(x), y))
            ...         optimizer.step()
            ...         optimizer.zero_grad()

        Note:
            A no-op in a job of one process. In a data-parallel job every joinable must be a
            ``Joinable`` (Accelerate lets ``Join`` fail later). As with ``Join``, a gradient
            step taken while some processes have left is averaged over all the processes,
            the ones that left counting as zeros. With gradient accumulation every process
            must synchronise on the same steps: a process whose data ends early synchronises
            at its last batch (the end of its loader) while the others do not, and the job
            then waits until the launcher's ``stall_timeout`` or ``timeout`` stops it (as it
            does with Accelerate); give every process a number of batches that is a multiple
            of the accumulation steps, or accumulate by hand with ``no_sync``.
        """
        if not isinstance(joinables, (list, tuple)):
            raise invalid("joinables", joinables, "expected a list of Joinable objects", TypeError)
        check_optional_bool("even_batches", even_batches)
        kind = self.state.distributed_type
        if kind is DistributedType.NO or not kind.name.startswith("MULTI_"):
            if kind is not DistributedType.NO:
                warnings.warn(
                    f"join_uneven_inputs has no effect with distributed_type={kind.value}: it "
                    "joins data-parallel (DDP) processes only",
                    stacklevel=3,
                )
            yield
            return
        from torch.distributed.algorithms import Join, Joinable  # only in multi-process jobs

        bad = [j for j in joinables if not isinstance(j, Joinable)]
        if bad:
            names = ", ".join(type(j).__name__ for j in bad)
            raise invalid(
                "joinables",
                f"[{names}]",
                "expected Joinable objects, such as a model prepared (wrapped in "
                "DistributedDataParallel) by this Accelerator",
                TypeError,
            )
        overridden = self._override_even_batches(even_batches)
        uneven = not (self.dataloader_config.even_batches if even_batches is None else even_batches)
        try:
            with Join(list(joinables), enable=uneven, throw_on_early_termination=False):
                yield
        finally:
            for shard, value in overridden:
                shard.even_batches = value

    def _override_even_batches(self, even_batches: bool | None) -> list[tuple[Any, bool]]:
        """Set ``even_batches`` on the prepared loaders' shards; returns what to put back."""
        if even_batches is None:
            return []
        overridden, skipped = [], False
        for loader in self.prepared.dataloaders:
            shard = find_shard(index_batches(loader))
            if shard is None:
                skipped = True
                continue
            overridden.append((shard, shard.even_batches))
            shard.even_batches = even_batches
        if skipped:
            warnings.warn(
                f"join_uneven_inputs(even_batches={even_batches}) changes map-style loaders only: "
                "the prepared loaders over iterable datasets (or dispatching batches) keep "
                "their setting",
                stacklevel=4,
            )
        return overridden

    def set_trigger(self) -> None:
        """Raise this process's flag; the next :meth:`check_trigger` sees it on every process.

        Example:
            >>> if torch.isnan(loss):
            ...     accelerator.set_trigger()
            >>> if accelerator.check_trigger():  # on every process
            ...     break
        """
        self.flag_tensor = torch.tensor(1, device=self.state.device)

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last check.

        A collective: call it on every process. It lowers the flag again when it was raised.

        Returns:
            The same bool on every process.
        """
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.state.device)
        raised = ops.reduce(self.flag_tensor, reduction="sum").item() >= 1
        if raised:
            self.flag_tensor = torch.tensor(0, device=self.state.device)
        return raised
