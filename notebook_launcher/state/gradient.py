"""GradientState: gradient accumulation and the data loaders being iterated, shared per process."""

from __future__ import annotations

import weakref
from typing import Any

from ..utils.kwargs import GradientAccumulationPlugin
from ..utils.replicas import ReplicaLocalDict
from ..utils.validation import check_bool, invalid


class GradientState:
    """When gradients are synchronised, and which data loader is being iterated.

    Shared by every instance in the process. Data loaders register themselves while they are
    iterated (``_add_dataloader``/``_remove_dataloader``, held through weak references), so
    ``end_of_dataloader`` and ``remainder`` describe the innermost active one.

    Args:
        gradient_accumulation_plugin: a :class:`~notebook_launcher.kwargs.GradientAccumulationPlugin`;
            a later instance given a different plugin replaces the settings.

    Attributes:
        sync_gradients: whether the next backward pass synchronises gradients across processes.
        plugin_kwargs: the plugin's settings that differ from its defaults (``to_kwargs()``).

    Note:
        As in Accelerate, settings left at their defaults are absent from ``plugin_kwargs``,
        and the properties then read ``num_steps=1``, ``adjust_scheduler=False`` and
        ``sync_with_dataloader=True``.
    """

    _shared_state = ReplicaLocalDict()  # per thread where XLA replicas are threads

    def __init__(self, gradient_accumulation_plugin: Any = None) -> None:
        if gradient_accumulation_plugin is not None and not isinstance(
            gradient_accumulation_plugin, GradientAccumulationPlugin
        ):
            raise invalid(
                "gradient_accumulation_plugin",
                gradient_accumulation_plugin,
                "expected a GradientAccumulationPlugin or None",
                TypeError,
            )
        self.__dict__ = self._shared_state
        settings = (
            gradient_accumulation_plugin.to_kwargs()
            if gradient_accumulation_plugin is not None
            else None
        )
        if not self.initialized:
            self.sync_gradients = True
            self._dataloader_references_ref = [None]
            self.plugin_kwargs = settings or {}
            self._is_xla_gradients_synced = False
        elif settings is not None and settings != self.plugin_kwargs:
            self.plugin_kwargs = settings

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\n"
            f"At end of current dataloader: {self.end_of_dataloader}\n"
            f"Real samples in the last batch: {self.remainder}\n"
            f"Gradient accumulation plugin: {self.plugin_kwargs}\n"
        )

    @staticmethod
    def _reset_state() -> None:
        """Forget the shared state (used between jobs and in tests)."""
        GradientState._shared_state.clear()

    @property
    def initialized(self) -> bool:
        """Whether the shared state exists."""
        return bool(GradientState._shared_state)

    @property
    def num_steps(self) -> int:
        """Steps to accumulate gradients over."""
        return self.plugin_kwargs.get("num_steps", 1)

    @property
    def adjust_scheduler(self) -> bool:
        """Whether learning-rate scheduler steps are adjusted for accumulation."""
        return self.plugin_kwargs.get("adjust_scheduler", False)

    @property
    def sync_with_dataloader(self) -> bool:
        """Whether gradients are synchronised at the end of each data loader."""
        return self.plugin_kwargs.get("sync_with_dataloader", True)

    @property
    def dataloader_references(self) -> list[Any]:
        """The registered data loaders, innermost last (None marks "outside any loader")."""
        return [ref() if ref is not None else None for ref in self._dataloader_references_ref]

    @dataloader_references.setter
    def dataloader_references(self, references: list[Any]) -> None:
        self._dataloader_references_ref = [
            weakref.ref(loader) if loader is not None else None for loader in references
        ]

    @property
    def active_dataloader(self) -> Any:
        """The data loader being iterated (the innermost one), or None."""
        return self.dataloader_references[-1]

    @property
    def in_dataloader(self) -> bool:
        """Whether a data loader is being iterated."""
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the active data loader is yielding its last batch."""
        if not self.in_dataloader:
            return False
        return bool(self.active_dataloader.end_of_dataloader)

    @property
    def remainder(self) -> int:
        """Real samples in the active loader's last global batch (the rest is padding).

        0 when the dataset divides evenly into global batches; -1 outside a loader, with
        ``drop_last`` or when the length is unknown. ``gather_for_metrics`` keeps
        ``data[:remainder]`` of the last batch.
        """
        if not self.in_dataloader:
            return -1
        return self.active_dataloader.remainder

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Whether XLA gradients were reduced before this optimizer step."""
        return self._is_xla_gradients_synced

    @is_xla_gradients_synced.setter
    def is_xla_gradients_synced(self, synced: bool) -> None:
        self._is_xla_gradients_synced = check_bool("is_xla_gradients_synced", synced)

    # The library's own data loaders and Accelerator change the state through these public
    # methods; the underscored names are Accelerate's, kept for code written against it.

    def set_sync_gradients(self, sync_gradients: bool) -> None:
        """Set whether the next backward pass synchronises gradients.

        Note:
            Accelerate's name is the private ``_set_sync_gradients`` (also here).
        """
        self.sync_gradients = check_bool("sync_gradients", sync_gradients)

    def add_dataloader(self, dataloader: Any) -> None:
        """Register a data loader that started iterating (it becomes the active one).

        Note:
            Accelerate's name is the private ``_add_dataloader`` (also here).
        """
        if dataloader is None:
            raise invalid("dataloader", dataloader, "expected a data loader", TypeError)
        # Assigning (not appending) goes through the setter, which stores weak references.
        self.dataloader_references = [*self.dataloader_references, dataloader]

    def remove_dataloader(self, dataloader: Any) -> None:
        """Unregister a data loader that finished iterating.

        Note:
            Accelerate's name is the private ``_remove_dataloader`` (also here).
        """
        self.dataloader_references = [
            loader for loader in self.dataloader_references if loader is not dataloader
        ]

    _set_sync_gradients = set_sync_gradients
    _add_dataloader = add_dataloader
    _remove_dataloader = remove_dataloader
