"""The base of every settings dataclass, and the gradient accumulation plugin."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import os
from dataclasses import dataclass
from typing import Any

from .environment import str_to_bool
from .validation import check_bool, check_int

_IGNORE_ENVIRONMENT = contextvars.ContextVar("ignore_environment", default=False)


@contextlib.contextmanager
def _environment_ignored():
    token = _IGNORE_ENVIRONMENT.set(True)
    try:
        yield
    finally:
        _IGNORE_ENVIRONMENT.reset(token)


def env_default(name: str, default: Any, kind: type = str) -> Any:
    """A setting's default from the environment variable ``name`` (as ``kind``), else ``default``.

    While :meth:`KwargsHandler.to_kwargs` computes the class defaults the environment is not
    read, so settings taken from it count as set by the user.
    """
    value = None if _IGNORE_ENVIRONMENT.get() else os.environ.get(name)
    if value is None:
        return default
    try:
        return str_to_bool(value) if kind is bool else kind(value)
    except ValueError:
        raise ValueError(
            f"environment variable {name}={value!r} is not valid: expected a {kind.__name__}"
        )


class KwargsHandler:
    """Mixin for settings dataclasses: ``to_kwargs()`` gives what differs from the defaults."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, deep-copied."""
        return copy.deepcopy(self.__dict__)

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose values differ from those of ``type(self)()``.

        Defaults are computed without reading the environment, so a value taken from an
        environment variable is included.
        """
        with _environment_ignored():
            defaults = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if k not in defaults or defaults[k] != v}


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """How gradients are accumulated over several batches.

    Args:
        num_steps: batches to accumulate over before an optimizer step (None: not set).
        adjust_scheduler: step the learning-rate scheduler to account for accumulation; keep
            True unless the scheduler was built for it.
        sync_with_dataloader: synchronise gradients (and restart the count) at the end of each
            data loader.
        sync_each_batch: synchronise gradients on every batch, using less memory in
            distributed runs at some speed.

    Example:
        >>> GradientAccumulationPlugin(num_steps=4).to_kwargs()
        {'num_steps': 4}
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if self.num_steps is not None:
            check_int("num_steps", self.num_steps, 1)
        check_bool("adjust_scheduler", self.adjust_scheduler)
        check_bool("sync_with_dataloader", self.sync_with_dataloader)
        check_bool("sync_each_batch", self.sync_each_batch)
