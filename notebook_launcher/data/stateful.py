"""Prepared loaders built on torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader=True``).

Both prepared loader classes have such a flavour, made when first asked for (torchdata is
imported then): ``StatefulDataLoaderShard`` and ``StatefulDataLoaderDispatcher``.

``state_dict()`` holds torchdata's state of the loader *as the training loop sees it*: the
prepared loaders read ahead (one batch for a shard, one global batch for a dispatcher, to know
the last batch while it is used), so the state is taken before each read-ahead, and a checkpoint
saved while batch ``k`` is in use resumes with batch ``k + 1``. It also holds the states of the
random generators at the start of the epoch: torchdata skips the batches already used by
drawing the epoch's order again, which must therefore be drawn from the same states. A
dispatcher's state also keeps the samples that complete the epoch's last batch (taken from its
first batch), so that a resumed epoch ends as the uninterrupted one would.

Every value in these states is one that ``torch.load(..., weights_only=True)`` reads (tensors,
numbers, strings, lists, tuples and dicts of them), as Accelerate loads checkpoint files.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch

from ..state.partial import PartialState
from ..utils.validation import invalid
from ._batches import send_to_device
from .dispatch import DataLoaderDispatcher
from .loaders import STATEFUL_FLAVOURS, DataLoaderShard

_END = object()
_classes: dict[type, type] = {}


def stateful_loader_class(base: type = DataLoaderShard) -> type:
    """The ``StatefulDataLoader`` flavour of ``base`` (:class:`DataLoaderShard` or
    :class:`DataLoaderDispatcher`), torchdata imported now.

    Raises:
        ImportError: torchdata is not installed.
    """
    if base not in _classes:
        try:
            from torchdata.stateful_dataloader import StatefulDataLoader
        except ImportError as error:
            raise ImportError(
                "use_stateful_dataloader=True needs torchdata's StatefulDataLoader: "
                "pip install torchdata"
            ) from error
        # torchdata's constructor calls torch.set_vital, which newer torch deprecates; the
        # warning names a line the user cannot change, so it is kept out of their output.
        warnings.filterwarnings(
            "ignore",
            message="'set_vital' is deprecated",
            category=UserWarning,
            module=r"torchdata\.stateful_dataloader",
        )
        mixin = _FLAVOURS[base]
        _classes[base] = type(
            f"Stateful{base.__name__}",
            (mixin, base, StatefulDataLoader),
            {"__module__": __name__, "__doc__": mixin.__doc__},
        )
    return _classes[base]


def is_stateful(loader: Any) -> bool:
    """Whether ``loader`` is a prepared loader built on torchdata's ``StatefulDataLoader``."""
    return isinstance(loader, _StatefulMixin)


class _StatefulMixin:
    """What both flavours share: the epoch's starting random states, and the saved state put
    back at the next iteration."""

    use_stateful_dataloader = True
    _epoch_start: dict[str, Any] | None = None
    _consumed: dict[str, Any] | None = None  # torchdata's state after the batch in use
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

    def _begin_epoch(self, resume: dict[str, Any] | None) -> None:
        """Called when an iteration starts, before the loader class underneath runs."""

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        self._pending = resume
        skip = self.skip_batches  # type: ignore[attr-defined]
        if resume is not None:
            self.skip_batches = 0  # torchdata's state already counts the skipped batches
        self._begin_epoch(resume)
        try:
            yield from super().__iter__()  # type: ignore[misc]
        finally:
            self.skip_batches = skip
        # A finished epoch leaves no position; a loop left early (``break``) keeps its own, as
        # torchdata's loader does, so that a checkpoint saved after the loop resumes there.
        self._epoch_start = None
        self._consumed = None

    def _replay_start(self) -> tuple[Iterator[Any], Any]:
        """torchdata's iterator of the epoch and its first batch (``_END`` if none).

        On a resume, the epoch's order (and the workers' seed) is drawn again from the epoch's
        starting state; then the checkpoint's state is put back.
        """
        resume, self._pending = self._pending, None
        saved_rng = None
        if resume is not None:
            saved_rng = torch.get_rng_state()
            torch.set_rng_state(resume["torch"])
        try:
            inner = super()._source()  # type: ignore[misc]
            self._consumed = self._torchdata_state()
            return inner, next(inner, _END)
        finally:
            if saved_rng is not None:
                torch.set_rng_state(saved_rng)

    def _in_epoch(self) -> bool:
        return self._epoch_start is not None and self._consumed is not None

    def state_dict(self) -> dict[str, Any]:
        """torchdata's state after the batch in use, with the epoch's starting random states."""
        if self._in_epoch():
            return {**self._epoch_start, "loader": self._consumed, "in_epoch": True}
        return {**self._snapshot(), "loader": None, "in_epoch": False}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration continues after the saved batch.

        A state of torchdata's own (``StatefulDataLoader.state_dict()``, as Accelerate saves
        it) is loaded as torchdata loads it.

        Raises:
            TypeError: ``state_dict`` is not a dict.
            ValueError: a state of another kind of loader, or its generators do not match.
        """
        if not isinstance(state_dict, dict):
            raise invalid("state_dict", state_dict, "expected a dict", TypeError)
        if not {"in_epoch", "generators"} <= set(state_dict):  # torchdata's own
            _base().load_state_dict(self, state_dict)
            return
        expected = self.state_dict().keys()
        if set(state_dict) != set(expected):
            raise invalid(
                "state_dict",
                sorted(state_dict),
                f"expected the keys of this loader's state_dict(): {sorted(expected)}",
            )
        restore_epoch_start(self, self._generators(), state_dict)
        if state_dict["in_epoch"]:
            if state_dict["loader"] is not None:
                _base().load_state_dict(self, state_dict["loader"])
            self._resume = dict(state_dict)


class _StatefulShardMixin(_StatefulMixin):
    """A :class:`DataLoaderShard` that is a torchdata ``StatefulDataLoader``: its
    ``state_dict()``/``load_state_dict()`` resume mid-epoch at the batch after the one in use."""

    def _source(self) -> Iterator[Any]:
        """The epoch's batches from torchdata, noting its state before each is read."""
        # After the shard has synchronised its generators: the epoch starts from these.
        self._epoch_start = self._snapshot()
        if self._pending is not None:
            self._epoch_start["torch"] = self._pending["torch"]
        inner, current = self._replay_start()
        # DataLoaderShard reads one batch ahead: when it reads batch k + 1 here, the loop is
        # given batch k, so the state taken just before that read is the loop's position.
        while current is not _END:
            yield current
            self._consumed = self._torchdata_state()
            current = next(inner, _END)


class _StatefulDispatcherMixin(_StatefulMixin):
    """A :class:`DataLoaderDispatcher` that is a torchdata ``StatefulDataLoader``: its
    ``state_dict()``/``load_state_dict()`` resume mid-epoch at the batch after the one in use.

    torchdata's state is that of the process that reads the batches (process 0); the other
    processes keep the rest (their epoch, and the samples that complete the last batch).
    """

    _started = False  # a batch of this epoch was given out
    _reading = False  # this process reads torchdata's iterator in this epoch
    _before_end: dict[str, Any] | None = None  # its state before the read that found the end
    _saved_pad: Any = None

    def _begin_epoch(self, resume: dict[str, Any] | None) -> None:
        self._epoch_start = self._snapshot()
        self._saved_pad = None
        if resume is not None:
            self._epoch_start["torch"] = resume["torch"]
            self._saved_pad = resume["pad"]
        self._started = self._reading = False
        self._before_end = None

    def _first_pad(self) -> Any:
        pad = self._saved_pad
        return None if pad is None else send_to_device(pad, PartialState().device)

    def _source(self) -> Iterator[Any]:
        """The epoch's batches from torchdata, noting its state before each is read."""
        inner, current = self._replay_start()
        self._reading = True
        before = self._consumed
        while current is not _END:
            yield current
            before = self._torchdata_state()
            current = next(inner, _END)
        self._before_end = before

    def _fetch(self, source: Iterator[Any], state: PartialState) -> Any:
        # The dispatcher reads one global batch (one or num_processes batches of torchdata)
        # ahead: the state just before that read is the loop's position.
        if self._reading:
            ended = self._before_end
            self._consumed = self._torchdata_state() if ended is None else ended
        return super()._fetch(source, state)  # type: ignore[misc]

    def _pieces(self, source: Iterator[Any], state: PartialState) -> Iterator[Any]:
        for piece in super()._pieces(source, state):  # type: ignore[misc]
            self._started = True
            yield piece

    def _in_epoch(self) -> bool:
        return self._epoch_start is not None and self._started

    def state_dict(self) -> dict[str, Any]:
        """As the shard's, with ``pad``: what completes the epoch's last batch (None: its
        first batch after a resume, as in Accelerate; so where those samples hold values
        other than tensors, numbers, strings and lists, tuples and dicts of them)."""
        state = super().state_dict()
        pad = getattr(self, "_pad", None) if state["in_epoch"] else None
        state["pad"] = send_to_device(pad, torch.device("cpu")) if _plain(pad) else None
        return state


def _plain(value: Any) -> bool:
    """Whether ``value`` reads back with ``torch.load(..., weights_only=True)``."""
    if value is None or isinstance(value, (torch.Tensor, bool, int, float, str)):
        return True
    if type(value) in (list, tuple):
        return all(_plain(item) for item in value)
    if type(value) is dict:
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in value.items())
    return False


_FLAVOURS = {DataLoaderShard: _StatefulShardMixin, DataLoaderDispatcher: _StatefulDispatcherMixin}
for _kind in _FLAVOURS:
    STATEFUL_FLAVOURS[_kind] = lambda kind=_kind: stateful_loader_class(kind)


def restore_epoch_start(loader: Any, generators: list[torch.Generator], state: dict) -> None:
    """Put ``loader`` back at the start of the epoch ``state`` was saved in: its generators'
    states, its sampler's seed and its epoch count (a stateful loader's ``state_dict``)."""
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
