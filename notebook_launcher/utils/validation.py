"""Argument checks that name the parameter, the value received and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def invalid(
    name: str, value: object, allowed: str, error: type[Exception] = ValueError
) -> Exception:
    """An exception saying ``name=value`` is not valid and what would be."""
    return error(f"{name}={value!r} is not valid: {allowed}.")


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


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``."""
    allowed = "expected an int" + ("" if minimum is None else f" >= {minimum}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, value, allowed, TypeError)
    if minimum is not None and value < minimum:
        raise invalid(name, value, allowed)
    return value


def check_number(name: str, value: object, positive: bool = False) -> float:
    """``value`` as a float if it is a finite real number (``> 0`` when ``positive``)."""
    allowed = "expected a finite number" + (" > 0" if positive else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, value, allowed, TypeError)
    if not math.isfinite(value) or (positive and value <= 0):
        raise invalid(name, value, allowed)
    return float(value)


def check_choice(name: str, value: object, choices: Iterable[str], normalize=None) -> str:
    """``value`` (after ``normalize``, e.g. ``str.lower``) if it is one of ``choices``."""
    options = list(choices)
    allowed = "allowed values are " + ", ".join(repr(c) for c in options)
    if not isinstance(value, str):
        raise invalid(name, value, allowed, TypeError)
    key = normalize(value) if normalize else value
    if key not in options:
        raise invalid(name, value, allowed)
    return key


def check_optional_str(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise invalid(name, value, "expected a str or None", TypeError)
    return value


def check_optional_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise invalid(name, value, "expected a callable or None", TypeError)
    return value
