"""What a node needs to run a rank, as the kernel asks and a node answers.

The kernel reads from the pickled function and arguments which modules loading them imports
(:func:`modules_imported`); each rank's node says which of those it cannot find and the versions
that must agree with the kernel's (:func:`describe_node`), before the function is loaded there.
Nothing is imported to find a module (``importlib.util.find_spec`` on its top-level name), so
the check runs no code of the user's.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import pickletools
import platform
import sys
from dataclasses import dataclass, field

# Loading a by-value function imports each module it uses through this call (its argument is
# the module's name, not a global): cloudpickle's ``subimport``.
_SUBIMPORT = "subimport"
_SUBIMPORT_GLOBAL = ("global", _SUBIMPORT)  # what the stack holds once that call is loaded
_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING"}
_GETS = {"BINGET", "LONG_BINGET", "GET"}
# Always there where Python runs: never worth a look.
_BUILTIN = frozenset({"__main__", "builtins", "copyreg", "_codecs", "__builtin__"})
# Packages that must have the same version on the kernel and on every rank's node.
AGREED = ("notebook_launcher", "cloudpickle")


def modules_imported(payload: bytes) -> tuple[str, ...]:
    """The top-level modules that unpickling ``payload`` imports (those its globals live in, and
    those a by-value function imports), sorted; the standard library's builtins left out."""
    found: set[str] = set()
    memo: dict[int, object] = {}
    pushed: list[object] = [None, None]  # the values the last two pushing opcodes pushed
    for opcode, arg, _ in pickletools.genops(payload):
        name = opcode.name
        if name in _STRINGS or name in _GETS:
            value = memo.get(arg) if name in _GETS else arg
            value = value.decode() if isinstance(value, bytes) else value
            if isinstance(value, str) and pushed[-1] == _SUBIMPORT_GLOBAL:
                found.add(value)  # the argument of a subimport(...) call
        elif name == "MEMOIZE":
            memo[len(memo)] = pushed[-1]
            continue
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = pushed[-1]
            continue
        elif name == "STACK_GLOBAL" or name == "GLOBAL":
            module, attribute = pushed[-2:] if name == "STACK_GLOBAL" else str(arg).split(" ", 1)
            if isinstance(module, str):
                found.add(module)
            value = _SUBIMPORT_GLOBAL if attribute == _SUBIMPORT else None
        else:
            value = None
        pushed = [pushed[-1], value]
    tops = {module.split(".")[0] for module in found if module}
    return tuple(sorted(tops - _BUILTIN - set(sys.builtin_module_names)))


@dataclass(frozen=True)
class NodeEnvironment:
    """What one process found: its Python, the versions of :data:`AGREED` and torch, and the
    modules asked about that it cannot find (name -> why)."""

    python: str
    versions: dict[str, str | None] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def version_of(module: str) -> str | None:
    """``module.__version__`` if it is loaded here, else its installed distribution's version
    (None if neither)."""
    version = getattr(sys.modules.get(module), "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(module)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            return None
    return str(version)


def describe_node(modules: tuple[str, ...] = ()) -> NodeEnvironment:
    """This process's :class:`NodeEnvironment`, asked about ``modules``."""
    missing = {}
    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                missing[module] = f"No module named {module!r}"
        except (ImportError, ValueError) as error:
            missing[module] = f"{type(error).__name__}: {error}"
    versions = {name: version_of(name) for name in (*AGREED, "torch")}
    return NodeEnvironment(python=platform.python_version(), versions=versions, missing=missing)


def to_json(environment: NodeEnvironment) -> bytes:
    """``environment`` as JSON (what a rank started by a scheduler sends the kernel)."""
    return json.dumps(dataclasses.asdict(environment)).encode()


def from_json(data: bytes) -> NodeEnvironment:
    """The inverse of :func:`to_json`; ValueError for anything else."""
    try:
        fields = json.loads(data)
        return NodeEnvironment(
            python=str(fields["python"]),
            versions={str(k): v for k, v in dict(fields["versions"]).items()},
            missing={str(k): str(v) for k, v in dict(fields["missing"]).items()},
        )
    except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as error:
        raise ValueError(f"not a node's environment: {error}") from None


__all__ = [
    "AGREED",
    "NodeEnvironment",
    "describe_node",
    "from_json",
    "modules_imported",
    "to_json",
    "version_of",
]
