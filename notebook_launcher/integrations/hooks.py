"""Run code once a module is imported (at once if it already is), and wrap methods reversibly.

The integrations use these inside a launched worker only, on top of wrapt:
:func:`when_imported` is a wrapt post-import hook (wrapt's finder on ``sys.meta_path`` answers
for the awaited module names only, and the module keeps its own loader and spec), and
:func:`wrap_method` puts a ``wrapt.FunctionWrapper`` in place of a method or a function (the
original stays reachable as ``__wrapped__``). Added here: a failing callback warns instead of
breaking the user's import, nothing is replaced twice, and :func:`undo` puts every original back
and disarms the callbacks still waiting (wrapt cannot unregister a hook).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import wrapt

Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]

_wrapped: list[tuple[Any, str, Any]] = []
_lock = threading.RLock()
_generation = 0  # undo() moves it on: callbacks registered before then no longer run


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


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once the module ``name`` is imported; now if it already is.

    Raises:
        TypeError: ``name`` is not a str or ``callback`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name={name!r} is not valid: expected a module name")
    if not callable(callback):
        raise TypeError(f"callback={callback!r} is not valid: expected a callable")
    generation = _generation

    def hook(module: ModuleType) -> None:
        if generation == _generation:
            _run(name, callback, module)

    wrapt.register_post_import_hook(hook, name)


def wrap_method(owner: Any, name: str, wrapper: Wrapper) -> bool:
    """Wrap ``owner.name`` (a class's method or a module's function) with wrapt's
    ``wrapper(wrapped, instance, args, kwargs)``; False (and nothing done) if already replaced."""
    return replace(owner, name, wrapt.FunctionWrapper(owner.__dict__[name], wrapper))


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
    """Disarm every waiting callback and put every wrapped method back."""
    global _generation
    with _lock:
        _generation += 1
        while _wrapped:
            owner, name, original = _wrapped.pop()
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
