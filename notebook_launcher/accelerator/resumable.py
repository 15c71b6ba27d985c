"""Prepared data loaders that remember where they are in an epoch, for exact resumes.

The Accelerator hands out these subclasses of :class:`~notebook_launcher.data.DataLoaderShard`
and :class:`~notebook_launcher.data.DataLoaderDispatcher`. Each records, when an epoch starts,
the epoch number and the states of its random generators, and counts the batches it has given
out since. ``state_dict()`` returns that; after ``load_state_dict()`` the next iteration replays
the same epoch from the same random states and skips the batches already used, so a resumed run
sees exactly the batches it would have seen without stopping.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..data import DataLoaderDispatcher, DataLoaderShard
from ..data.stateful import restore_epoch_start
from ..utils.validation import invalid

_STATE_KEYS = ("iteration", "generators", "torch", "position", "in_epoch", "seed")


class ResumableMixin:
    """Epoch position bookkeeping shared by the resumable loaders."""

    _epoch_start: dict[str, Any] | None = None
    _position: int = 0
    _resume: dict[str, Any] | None = None

    def _generators(self) -> list[torch.Generator]:
        found: list[torch.Generator] = []
        sampler = self.get_sampler()  # type: ignore[attr-defined]
        candidates = (
            getattr(self, "synchronized_generator", None),
            getattr(sampler, "generator", None),
            self.generator,  # type: ignore[attr-defined]
        )
        for generator in candidates:
            if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
                found.append(generator)
        return found

    def _snapshot(self) -> dict[str, Any]:
        sampler = self.get_sampler()  # type: ignore[attr-defined]
        return {
            "iteration": self.iteration,  # type: ignore[attr-defined]
            "generators": [g.get_state() for g in self._generators()],
            "torch": torch.get_rng_state(),
            "seed": getattr(sampler, "initial_seed", None),
        }

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        skip = resume["position"] if resume else 0
        # Starting an epoch draws from the global torch generator (a sampler without a
        # generator seeds its shuffle there; the iterator takes a base seed). On a resume those
        # draws are replayed from the epoch's starting state, then the checkpoint's is put back.
        saved_rng = torch.get_rng_state() if resume else None
        if resume:
            torch.set_rng_state(resume["torch"])
        self._epoch_start = self._snapshot()
        self._position = skip
        self.skip_batches += skip  # type: ignore[attr-defined]
        inner = super().__iter__()  # type: ignore[misc]
        try:
            current = next(inner)
        except StopIteration:
            self._epoch_start = None
            return
        finally:
            self.skip_batches -= skip  # type: ignore[attr-defined]
            if saved_rng is not None:
                torch.set_rng_state(saved_rng)
        self._position += 1
        yield current
        for current in inner:
            self._position += 1
            yield current
        # A finished epoch leaves no position; a loop left early (``break``) keeps its own, so
        # that a checkpoint saved after the loop resumes after the last batch used.
        self._epoch_start = None

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: its epoch, random states at the epoch's start, batches used."""
        if self._epoch_start is not None:
            return {**self._epoch_start, "position": self._position, "in_epoch": True}
        return {**self._snapshot(), "position": 0, "in_epoch": False}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration continues where that one stood.

        Raises:
            ValueError: ``state_dict`` is not a loader state, or its generators do not match.
        """
        if not isinstance(state_dict, dict) or set(state_dict) != set(_STATE_KEYS):
            raise invalid(
                "state_dict", state_dict, "expected the dict a resumable loader's state_dict gave"
            )
        restore_epoch_start(self, self._generators(), state_dict)
        self._resume = dict(state_dict) if state_dict["in_epoch"] else None


class ResumableDataLoaderShard(ResumableMixin, DataLoaderShard):
    """A :class:`DataLoaderShard` that can be saved and resumed mid-epoch."""


class ResumableDataLoaderDispatcher(ResumableMixin, DataLoaderDispatcher):
    """A :class:`DataLoaderDispatcher` that can be saved and resumed mid-epoch."""


_RESUMABLE = {
    DataLoaderShard: ResumableDataLoaderShard,
    DataLoaderDispatcher: ResumableDataLoaderDispatcher,
}


def make_resumable(loader: DataLoader) -> DataLoader:
    """Turn a prepared loader into its resumable kind, in place (other loaders are returned as is)."""
    resumable = _RESUMABLE.get(type(loader))
    if resumable is not None:
        loader.__class__ = resumable
    return loader


def is_resumable(loader: Any) -> bool:
    """Whether ``loader`` records its position (``state_dict``/``load_state_dict``): a loader
    made resumable here, or one built on torchdata's ``StatefulDataLoader``."""
    return isinstance(loader, ResumableMixin) or is_stateful(loader)


def is_stateful(loader: Any) -> bool:
    """Whether ``loader`` is a prepared loader built on torchdata's ``StatefulDataLoader``."""
    return isinstance(loader, DataLoaderShard) and loader.use_stateful_dataloader is True
