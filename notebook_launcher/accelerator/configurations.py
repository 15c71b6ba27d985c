"""Settings dataclasses the Accelerator takes: how data loaders are prepared, where files go."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..utils.dataclasses import KwargsHandler
from ..utils.validation import check_bool, check_int, check_optional_bool, invalid


def _check_optional_path(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise invalid(name, value, "expected a path (str or os.PathLike) or None", TypeError)
    return os.fspath(value)


@dataclass
class DataLoaderConfiguration(KwargsHandler):
    """How :meth:`Accelerator.prepare` shards data loaders (see ``prepare_data_loader``).

    Args:
        split_batches: cut each batch into one piece per process instead of giving each
            process whole batches.
        dispatch_batches: read batches on process 0 and broadcast them (None: only for
            iterable datasets).
        even_batches: repeat samples from the start so every process gets as many batches.
        use_seedable_sampler: replace a ``RandomSampler`` by a ``SeedableRandomSampler``.
        data_seed: the seed of that sampler (None: torch's initial seed).
        non_blocking: non-blocking device transfers.
        use_stateful_dataloader: build prepared loaders on torchdata's ``StatefulDataLoader``
            (needs ``torchdata``); ``save_state`` records their state and ``load_state``
            resumes them mid-epoch. Without it, as in Accelerate, a checkpoint holds no
            loader position.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        for name in ("split_batches", "even_batches", "use_seedable_sampler", "non_blocking"):
            check_bool(name, getattr(self, name))
        check_bool("use_stateful_dataloader", self.use_stateful_dataloader)
        check_optional_bool("dispatch_batches", self.dispatch_batches)
        if self.data_seed is not None:
            check_int("data_seed", self.data_seed)


@dataclass
class ProjectConfiguration(KwargsHandler):
    """Where the Accelerator writes checkpoints and logs.

    Args:
        project_dir: the directory of the run (checkpoints go to ``project_dir/checkpoints``
            with ``automatic_checkpoint_naming``).
        logging_dir: where trackers write (default: ``project_dir``).
        automatic_checkpoint_naming: ``save_state()`` without a directory writes
            ``checkpoints/checkpoint_<iteration>``.
        total_limit: the most automatic checkpoints kept (the oldest are deleted).
        iteration: the number of the next automatic checkpoint.
        save_on_each_node: write checkpoints on each node, for nodes without a shared disk.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        self.project_dir = _check_optional_path("project_dir", self.project_dir)
        self.logging_dir = _check_optional_path("logging_dir", self.logging_dir)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
        check_bool("automatic_checkpoint_naming", self.automatic_checkpoint_naming)
        if self.total_limit is not None:
            check_int("total_limit", self.total_limit, 1)
        check_int("iteration", self.iteration, 0)
        check_bool("save_on_each_node", self.save_on_each_node)

    def set_directories(self, project_dir: str | os.PathLike | None = None) -> None:
        """Set ``project_dir`` (and ``logging_dir`` where it was not given)."""
        self.project_dir = _check_optional_path("project_dir", project_dir)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
