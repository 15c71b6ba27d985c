"""Run code once a module is imported (at once if it already is), and wrap methods reversibly.

The integrations use these inside a launched worker only: a finder placed first on
``sys.meta_path`` answers for the few module names something waits for (and for no other), lets
the usual finders locate the module, and runs the waiting callbacks right after the module's own
code. The module keeps its own loader and spec. Wrapped functions keep the original as
``__wrapped__`` and :func:`undo` puts every original back.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

_pending: dict[str, list[Callable[[ModuleType], None]]] = {}
_wrapped: list[tuple[Any, str, Any]] = []
_lock = threading.RLock()


def _run(name: str, callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    """A failing callback must not break the user's import: it is reported as a warning."""
    try:
        callback(module)
    except Exception as exc:
        warnings.warn(
            f"notebook_launcher could not set up its integration with {name}: "
            f"{type(exc).__name__}: {exc}",
            RuntimeWarning,
            stacklevel=2,
        )


class _Loader(importlib.abc.Loader):
    """Executes the module with its own loader, then runs what waits for it."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self._loader  # the module keeps its own
        self._loader.exec_module(module)
        with _lock:
            callbacks = _pending.pop(module.__name__, [])
        for callback in callbacks:
            _run(module.__name__, callback, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Answers only for the modules something waits for, with the spec the other finders give."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # a namespace package or an old-style loader: nothing to wrap
        spec.loader = _Loader(spec.loader)
        return spec


_finder = _Finder()


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once the module ``name`` is imported; now if it already is.

    Raises:
        TypeError: ``name`` is not a str or ``callback`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name={name!r} is not valid: expected a module name")
    if not callable(callback):
        raise TypeError(f"callback={callback!r} is not valid: expected a callable")
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _pending.setdefault(name, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    _run(name, callback, module)


def wrap_method(owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> bool:
    """Replace ``owner.name`` (a class's method or a module's function) by ``make(original)``;
    False (and nothing done) if already replaced."""
    original = owner.__dict__[name]
    return replace(owner, name, functools.wraps(original)(make(original)))


_ABSENT = object()  # what an owner that did not define the name itself had (undo deletes it)


def replace(owner: Any, name: str, value: Any) -> bool:
    """Set ``owner.name`` to ``value`` until :func:`undo`; False (nothing done) if already set."""
    with _lock:
        if any(known is owner and attr == name for known, attr, _ in _wrapped):
            return False
        _wrapped.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, value)
    return True


def undo() -> None:
    """Forget every waiting callback, remove the finder and put every wrapped method back."""
    with _lock:
        _pending.clear()
        if _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        while _wrapped:
            owner, name, original = _wrapped.pop()
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
