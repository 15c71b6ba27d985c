"""Data loading across the processes of a job: each process reads its own share of the data.

:func:`prepare_data_loader` turns a ``DataLoader`` into the loader one process iterates; the
classes below are its building blocks, with the names and semantics of Accelerate's
``accelerate.data_loader``.
"""

from __future__ import annotations

from . import stateful  # noqa: F401  (registers the StatefulDataLoader flavours)
from .dispatch import DataLoaderDispatcher
from .iterable import IterableDatasetShard
from .loaders import DataLoaderShard, DataLoaderStateMixin, get_sampler
from .prepare import prepare_data_loader
from .samplers import BatchSamplerShard, SeedableRandomSampler
from .skip import SkipBatchSampler, SkipDataLoader, skip_first_batches

__all__ = [
    "BatchSamplerShard",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "DataLoaderStateMixin",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "get_sampler",
    "prepare_data_loader",
    "skip_first_batches",
]
