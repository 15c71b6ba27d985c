"""Prepared loaders built on torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader=True``).

``state_dict()`` is torchdata's state of the loader *as the training loop sees it*: the
prepared loader reads one batch ahead (to know the last batch while it is used), so the state
is taken before each read-ahead (one ``state_dict()`` of torchdata's per batch), and a
checkpoint saved while batch ``k`` is in use resumes with batch ``k + 1``. It also holds the states of the random generators at the start of the
epoch: torchdata skips the batches already used by drawing the epoch's order again, which must
therefore be drawn from the same states. torchdata is imported only when such a loader is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..utils.validation import invalid
from .loaders import STATEFUL_FLAVOUR, DataLoaderShard

_KEYS = ("loader", "iteration", "generators", "torch", "seed", "in_epoch")
_classes: dict[str, type] = {}


def stateful_loader_class() -> type:
    """The ``StatefulDataLoader`` flavour of :class:`DataLoaderShard` (torchdata imported now).

    Raises:
        ImportError: torchdata is not installed.
    """
    if "shard" not in _classes:
        try:
            from torchdata.stateful_dataloader import StatefulDataLoader
        except ImportError as error:
            raise ImportError(
                "use_stateful_dataloader=True needs torchdata's StatefulDataLoader: "
                "pip install torchdata"
            ) from error
        _classes["shard"] = type(
            "StatefulDataLoaderShard",
            (_StatefulMixin, DataLoaderShard, StatefulDataLoader),
            {"__module__": __name__, "__doc__": _StatefulMixin.__doc__},
        )
    return _classes["shard"]


class _StatefulMixin:
    """A :class:`DataLoaderShard` that is a torchdata ``StatefulDataLoader``: its
    ``state_dict()``/``load_state_dict()`` resume mid-epoch at the batch after the one in use."""

    use_stateful_dataloader = True
    _consumed: dict[str, Any] | None = None  # torchdata's state after the batch in use
    _epoch_start: dict[str, Any] | None = None
    _resume: dict[str, Any] | None = None  # a loaded state, until the next iteration starts
    _pending: dict[str, Any] | None = None  # that state, while the iteration starts

    def _generators(self) -> list[torch.Generator]:
        found: list[torch.Generator] = []
        sampler = self.get_sampler()  # type: ignore[attr-defined]
        for generator in (
            getattr(self, "synchronized_generator", None),
            getattr(sampler, "generator", None),
            self.generator,  # type: ignore[attr-defined]
        ):
            if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
                found.append(generator)
        return found

    def _snapshot(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,  # type: ignore[attr-defined]
            "generators": [g.get_state() for g in self._generators()],
            "torch": torch.get_rng_state(),
            "seed": getattr(self.get_sampler(), "initial_seed", None),  # type: ignore[attr-defined]
        }

    def _torchdata_state(self) -> dict[str, Any]:
        return _base().state_dict(self)

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        self._pending = resume
        skip = self.skip_batches  # type: ignore[attr-defined]
        if resume is not None:
            self.skip_batches = 0  # torchdata's state already counts the skipped batches
        try:
            yield from super().__iter__()  # type: ignore[misc]
        finally:
            self.skip_batches = skip
        # A finished epoch leaves no position; a loop left early (``break``) keeps its own, as
        # torchdata's loader does, so that a checkpoint saved after the loop resumes there.
        self._epoch_start = None
        self._consumed = None

    def _source(self) -> Iterator[Any]:
        """The epoch's batches from torchdata, noting its state before each is read."""
        self._epoch_start = self._snapshot()
        resume, self._pending = self._pending, None
        saved_rng = None
        if resume is not None:
            # The epoch's order (and the workers' seed) is drawn again from the epoch's
            # starting state; then the checkpoint's state is put back.
            self._epoch_start["torch"] = resume["torch"]
            saved_rng = torch.get_rng_state()
            torch.set_rng_state(resume["torch"])
        inner = super()._source()  # type: ignore[misc]
        try:
            self._consumed = self._torchdata_state()
            current = next(inner, _END)
        finally:
            if saved_rng is not None:
                torch.set_rng_state(saved_rng)
        # DataLoaderShard reads one batch ahead: when it reads batch k + 1 here, the loop is
        # given batch k, so the state taken just before that read is the loop's position.
        while current is not _END:
            yield current
            self._consumed = self._torchdata_state()
            current = next(inner, _END)

    def state_dict(self) -> dict[str, Any]:
        """torchdata's state after the batch in use, with the epoch's starting random states."""
        if self._epoch_start is not None and self._consumed is not None:
            return {**self._epoch_start, "loader": self._consumed, "in_epoch": True}
        return {**self._snapshot(), "loader": None, "in_epoch": False}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration continues after the saved batch.

        A state of torchdata's own (``StatefulDataLoader.state_dict()``, as Accelerate saves
        it) is loaded as torchdata loads it.

        Raises:
            ValueError: ``state_dict`` is not a loader state, or its generators do not match.
        """
        if not isinstance(state_dict, dict):
            raise invalid("state_dict", state_dict, "expected a dict", TypeError)
        if set(state_dict) != set(_KEYS):  # torchdata's own
            _base().load_state_dict(self, state_dict)
            return
        restore_epoch_start(self, self._generators(), state_dict)
        if state_dict["in_epoch"]:
            _base().load_state_dict(self, state_dict["loader"])
            self._resume = dict(state_dict)


_END = object()
STATEFUL_FLAVOUR[:] = [stateful_loader_class]


def restore_epoch_start(loader: Any, generators: list[torch.Generator], state: dict) -> None:
    """Put ``loader`` back at the start of the epoch ``state`` was saved in: its generators'
    states, its sampler's seed and its epoch count (a resumable or stateful loader's
    ``state_dict``)."""
    if len(generators) != len(state["generators"]):
        raise ValueError(
            f"state_dict holds {len(state['generators'])} generator states but this "
            f"loader has {len(generators)} generators: it was saved from a different loader"
        )
    for generator, saved in zip(generators, state["generators"], strict=True):
        generator.set_state(saved)
    sampler = loader.get_sampler()
    if state["seed"] is not None and hasattr(sampler, "initial_seed"):
        sampler.initial_seed = state["seed"]
    loader.iteration = state["iteration"]


def _base() -> type:
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader
