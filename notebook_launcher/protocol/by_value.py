"""Pickling functions by value (cloudpickle) without a scan of every loaded module per call.

For each module a function uses (``torch``, ``np`` ...), cloudpickle records the submodules it
may reach by attribute (``torch.distributed`` through ``torch``) by testing every name in
``sys.modules`` against that module's name: about a millisecond per module with torch loaded,
paid by every session call. :func:`faster_function_pickling` swaps in a lookup that gives the
same modules by walking down from the module through the names the code uses
(``torch`` -> ``torch.distributed`` when ``distributed`` is one of them): a few dictionary
lookups. A submodule is only ever loaded after its parent package, so the walk reaches every
module the scan would.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

import cloudpickle

_module = sys.modules.get("cloudpickle.cloudpickle", cloudpickle)
_ORIGINAL = getattr(_module, "_find_imported_submodules", None)
_lock = threading.Lock()
_users = 0


def submodules_used(code: types.CodeType, dependencies: Iterable[Any]) -> list[types.ModuleType]:
    """The loaded submodules of the packages among ``dependencies`` that ``code`` can reach
    through attribute names it uses: those whose every dotted part after the package's name is
    one of ``code.co_names``."""
    names = set(code.co_names)
    found: list[types.ModuleType] = []
    for module in dependencies:
        if not isinstance(module, types.ModuleType) or not getattr(module, "__package__", None):
            continue
        parents = [module.__name__]
        while parents:
            parent = parents.pop()
            for name in names:
                dotted = f"{parent}.{name}"
                submodule = sys.modules.get(dotted)
                if submodule is not None:
                    found.append(submodule)
                    parents.append(dotted)
    return found


@contextlib.contextmanager
def faster_function_pickling() -> Iterator[None]:
    """cloudpickle, while this is active (in any thread), looks submodules up with
    :func:`submodules_used`; the original lookup is put back once no caller needs it."""
    global _users
    if _ORIGINAL is None:  # a cloudpickle without that step: nothing to speed up
        yield
        return
    with _lock:
        if _users == 0:
            _module._find_imported_submodules = submodules_used
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _module._find_imported_submodules = _ORIGINAL


def dumps(value: Any) -> bytes:
    """``cloudpickle.dumps(value)``, with the faster submodule lookup."""
    with faster_function_pickling():
        return cloudpickle.dumps(value)
