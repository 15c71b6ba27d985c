"""Which logged values the panels chart: numbers, one-element tensors, not bools nor text."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from ..live import MAX_NAME


def is_number(value: Any) -> bool:
    """A real number (bools excluded) or a one-element tensor/array."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        return True
    size = getattr(value, "numel", None) or getattr(value, "size", None)
    try:
        count = size() if callable(size) else size
    except Exception:
        return False
    return count == 1 and hasattr(value, "item") and not isinstance(value, (str, bytes))


def numbers_of(values: Any, skip: Any = lambda name: False) -> dict[str, Any]:
    """The entries of ``values`` with a str name and a number, less those ``skip(name)`` names."""
    if not isinstance(values, Mapping):
        return {}
    return {
        name: value
        for name, value in values.items()
        if isinstance(name, str) and len(name) <= MAX_NAME and is_number(value) and not skip(name)
    }


def step_of(step: Any) -> int | float | None:
    """``step`` as :func:`notebook_launcher.log` takes it (NumPy and tensor steps converted)."""
    if step is None or isinstance(step, bool):
        return None
    value = step.item() if not isinstance(step, (int, float)) and is_number(step) else step
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return value if isinstance(value, float) and math.isfinite(value) else None


def check_mapping(name: str, value: Any) -> Any:
    """``value`` if it is a mapping of names to values, else a TypeError naming ``name``."""
    if not isinstance(value, Mapping):
        text = repr(value)
        text = text if len(text) <= 60 else text[:57] + "..."
        raise TypeError(f"{name}={text} is not valid: expected a dict of names to values")
    return value
