"""The Accelerator's uneven-input joins, cross-process triggers and parallelism views, as a mixin.

Kept apart from :mod:`notebook_launcher.accelerator` so that each file stays small.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from . import ops
from .data.loaders import find_shard, index_batches
from .utils.enums import DistributedType
from .utils.validation import check_optional_bool, invalid


class AcceleratorDistributed:
    """Join, triggers and the read-only parallelism settings for :class:`Accelerator`."""

    state: Any
    flag_tensor: torch.Tensor | None

    # -- uneven inputs -----------------------------------------------------------------------

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
        from torch.distributed.algorithms import Join, Joinable

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
        uneven = not (self.even_batches if even_batches is None else even_batches)
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
        for loader in self._dataloaders:
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

    # -- triggers ----------------------------------------------------------------------------

    def set_trigger(self) -> None:
        """Raise this process's flag; the next :meth:`check_trigger` sees it on every process.

        Example:
            >>> if torch.isnan(loss):
            ...     accelerator.set_trigger()
            >>> if accelerator.check_trigger():  # on every process
            ...     break
        """
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last check.

        A collective: call it on every process. It lowers the flag again when it was raised.

        Returns:
            The same bool on every process.
        """
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.device)
        raised = ops.reduce(self.flag_tensor, reduction="sum").item() >= 1
        if raised:
            self.flag_tensor = torch.tensor(0, device=self.device)
        return raised

    # -- settings ----------------------------------------------------------------------------

    @property
    def native_amp(self) -> bool:
        """Whether torch's own mixed precision (autocast, and a GradScaler for fp16) is on."""
        return self.state.mixed_precision in ("fp16", "bf16")

    @property
    def use_stateful_dataloader(self) -> bool:
        """The DataLoaderConfiguration's setting (True is refused when a loader is prepared)."""
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
