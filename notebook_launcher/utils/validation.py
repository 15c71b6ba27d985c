"""Argument checks that name the parameter, the value received and what is allowed."""

from __future__ import annotations

import math
import os
import reprlib
from collections.abc import Iterable
from typing import Any

_BRIEF = reprlib.Repr()
_BRIEF.maxstring = _BRIEF.maxother = 60
_BRIEF.maxlevel = 3


def short_repr(value: Any) -> str:
    """``repr(value)`` cut short with :mod:`reprlib` and on one line, for messages; never raises
    (an object whose ``repr`` fails is named by its type)."""
    return " ".join(_BRIEF.repr(value).split())


def invalid(
    name: str, value: object, allowed: str, error: type[Exception] = ValueError
) -> Exception:
    """An exception saying ``name=value`` is not valid and what would be."""
    return error(f"{name}={_safe_repr(value)} is not valid: {allowed}.")


def _safe_repr(value: Any, longest: int = 200) -> str:
    """``repr(value)``, cut to ``longest`` characters; an int too long to print (Python limits
    int-to-str conversion) or an object whose repr fails is described instead."""
    try:
        text = repr(value)
    except Exception:
        if isinstance(value, int):
            return f"<an int of {value.bit_length()} bits>"
        return f"<{type(value).__name__} object>"
    return text if len(text) <= longest else text[: longest - 3] + "..."


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool, else TypeError."""
    if not isinstance(value, bool):
        raise invalid(name, value, "expected True or False", TypeError)
    return value


def check_optional_bool(name: str, value: object) -> bool | None:
    """``value`` if it is a bool or None, else TypeError."""
    if value is not None and not isinstance(value, bool):
        raise invalid(name, value, "expected True, False or None", TypeError)
    return value


# The checks run on hot paths (every collective call): the message is built only on failure.


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``."""
    wrong_type = isinstance(value, bool) or not isinstance(value, int)
    if wrong_type or (minimum is not None and value < minimum):
        allowed = "expected an int" + ("" if minimum is None else f" >= {minimum}")
        raise invalid(name, value, allowed, TypeError if wrong_type else ValueError)
    return value


def check_number(name: str, value: object, positive: bool = False) -> float:
    """``value`` as a float if it is a finite real number (``> 0`` when ``positive``)."""
    wrong_type = isinstance(value, bool) or not isinstance(value, (int, float))
    if wrong_type or not math.isfinite(value) or (positive and value <= 0):
        allowed = "expected a finite number" + (" > 0" if positive else "")
        raise invalid(name, value, allowed, TypeError if wrong_type else ValueError)
    return float(value)


def check_choice(name: str, value: object, choices: Iterable[str], normalize=None) -> str:
    """``value`` (after ``normalize``, e.g. ``str.lower``) if it is one of ``choices``."""
    options = choices if isinstance(choices, (tuple, frozenset, set, list)) else list(choices)
    wrong_type = not isinstance(value, str)
    key = None if wrong_type else normalize(value) if normalize else value
    if wrong_type or key not in options:
        allowed = "allowed values are " + ", ".join(repr(c) for c in options)
        raise invalid(name, value, allowed, TypeError if wrong_type else ValueError)
    return key


def check_path(name: str, value: Any, suffixes: tuple[str, ...] = ()) -> str:
    """``value`` as a str path, if it is a non-empty str or ``os.PathLike`` (ending in one of
    ``suffixes``, compared without case, when given)."""
    allowed = "expected a path (str or os.PathLike)"
    if suffixes:
        allowed += " ending in " + ", ".join(suffixes[:-1]) + " or " + suffixes[-1]
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise invalid(name, value, allowed, TypeError)
    path = os.fspath(value)
    if suffixes and not path.lower().endswith(tuple(s.lower() for s in suffixes)):
        raise invalid(name, value, allowed)
    return path


def check_optional_str(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise invalid(name, value, "expected a str or None", TypeError)
    return value


def check_optional_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise invalid(name, value, "expected a callable or None", TypeError)
    return value


LONGEST_WAIT = 30 * 24 * 3600.0  # 30 days: the most any timeout may be


def check_int_in(
    name: str, value: object, minimum: int, maximum: int | None = None, why: str = ""
) -> int:
    """``value`` if it is an int (not a bool) from ``minimum`` to ``maximum``; ``why`` says
    where the maximum comes from."""
    allowed = (
        f"expected an int >= {minimum}"
        if maximum is None
        else f"expected an int >= {minimum} and <= {maximum}"
    )
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, value, allowed)
    if value < minimum or (maximum is not None and value > maximum):
        raise invalid(name, value, allowed + why)
    return value


def check_seconds(
    name: str,
    value: object,
    allow_none: bool = True,
    low: float = 0.0,
    high: float = LONGEST_WAIT,
) -> float | None:
    """``value`` as a float number of seconds, > 0 and from ``low`` to ``high`` (or None)."""
    if value is None and allow_none:
        return None
    allowed = (
        f"expected a number of seconds > 0 (and <= {high:g})"
        if low == 0
        else f"expected a number of seconds > 0 (from {low:g} to {high:g})"
    ) + (" or None" if allow_none else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, value, allowed)
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        raise invalid(name, value, allowed) from None
    if not math.isfinite(seconds) or seconds <= 0 or seconds < low or seconds > high:
        raise invalid(name, value, allowed)
    return seconds
