"""A package facade whose names load on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: dict[str, tuple[str, ...]]
) -> tuple[dict[str, str], Callable[[str], Any], Callable[[], list[str]]]:
    """For the package whose globals are ``namespace``: each name of ``exports`` (relative module
    -> names) -> its module, and the package's ``__getattr__`` and ``__dir__``, which import a
    name from its module when first asked for and keep it in ``namespace``."""
    where = {name: module for module, names in exports.items() for name in names}
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name], package), name)
        namespace[name] = value  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return where, __getattr__, __dir__
