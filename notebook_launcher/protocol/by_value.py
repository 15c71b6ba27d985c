"""Pickling functions by value (cloudpickle) without a scan of every loaded module per call.

For each module a function uses (``torch``, ``np`` ...), cloudpickle records the submodules it
may reach by attribute (``torch.distributed`` through ``torch``) by testing every name in
``sys.modules`` against that module's name: about a millisecond per module with torch loaded,
paid by every session call. :func:`faster_function_pickling` swaps in a lookup that gives the
same modules by walking down from the module through the names the code uses
(``torch`` -> ``torch.distributed`` when ``distributed`` is one of them): a few dictionary
lookups. A submodule is only ever loaded after its parent package, so the walk reaches every
module the scan would.

cloudpickle also renames the code of every function it pickles by value ``<dynamic-code>``;
:class:`CellPickler` keeps the file name of code written in a notebook cell and sends the
cell's lines and name along, so a rank's traceback and debugger show "Cell In[3], line 5" and
the line.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

import cloudpickle

from ..utils import cells

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


def is_cell_file(path: str) -> bool:
    """Whether ``path`` names the code of a notebook cell (IPython files each cell's code)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return path in getattr(getattr(shell, "compile", None), "_filename_map", {})


def cell_code(
    args: tuple, filename: str, lines: list[str], shown: str | None = None
) -> types.CodeType:
    """Code cloudpickle rebuilds from ``args``, named ``filename`` again, its cell's ``lines``
    put where tracebacks and debuggers look lines up, and the cell's name (``shown``, "Cell
    In[3]") where they look names up."""
    if lines and filename not in linecache.cache:
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    if shown and shown != filename:
        cells.NAMES.setdefault(filename, shown)
    args = tuple(filename if arg == "<dynamic-code>" else arg for arg in args)
    return types.CodeType(*args)


_code_reduce = getattr(_module, "_code_reduce", None)


class CellPickler(cloudpickle.Pickler):
    """cloudpickle's pickler, keeping where code written in a notebook cell comes from."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType and _code_reduce is not None:
            if is_cell_file(obj.co_filename):
                _, args = _code_reduce(obj)
                filename = obj.co_filename
                lines = linecache.getlines(filename)
                return cell_code, (args, filename, lines, cells.code_name(filename))
        return super().reducer_override(obj)


def dumps(value: Any) -> bytes:
    """``cloudpickle.dumps(value)``, with the faster submodule lookup, cell code named."""
    with faster_function_pickling():
        file = io.BytesIO()
        CellPickler(file).dump(value)
        return file.getvalue()
