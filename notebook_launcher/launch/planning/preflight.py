"""Cheap checks run in the kernel before any worker starts.

Each check returns None or a :class:`Finding` that says what is wrong, why it matters and how to
fix it; :func:`run_preflight` raises on the first finding.
"""

from __future__ import annotations

import logging
import sys
import types
from dataclasses import replace
from typing import Any

from ...backends import Finding, all_backends
from ...utils.environment import say
from ...utils.validation import short_repr
from ..errors import PreflightError
from ..launchers import LAUNCHERS
from .plan import LaunchPlan

logger = logging.getLogger(__name__)


def check_function(function: Any) -> None:
    """Raise TypeError unless ``function`` is something the workers can call."""
    if callable(function):
        return
    hint = (
        " If the function was called instead of passed, write "
        "notebook_launcher(train, args=(...)) rather than notebook_launcher(train(...))."
    )
    raise TypeError(
        f"function={short_repr(function)} is not valid: expected a callable, got "
        f"{type(function).__name__}.{hint}"
    )


def check_args(args: Any) -> tuple:
    if isinstance(args, (tuple, list)):
        return tuple(args)
    raise TypeError(
        f"args={short_repr(args)} is not valid: expected a tuple of positional arguments, "
        f"got {type(args).__name__} (for one argument write args=(value,))"
    )


def process_group_in_kernel(plan: LaunchPlan) -> Finding | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return Finding(
        what="A torch.distributed process group already exists in this kernel.",
        why=(
            "workers would inherit it (or collide with it) instead of joining the launched job, "
            "which gives wrong results or hangs."
        ),
        fix=(
            "create PartialState/Accelerator and process groups only inside the launched "
            "function; in this kernel call torch.distributed.destroy_process_group() or restart it."
        ),
    )


def find_unpicklable(value: Any, name: str, depth: int = 0) -> str | None:
    """Describe the innermost part of ``value`` that cloudpickle cannot pickle, or None."""
    import cloudpickle

    try:
        cloudpickle.dumps(value)
        return None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if depth < 6:
        for child_name, child in _children(value, name):
            inner = find_unpicklable(child, child_name, depth + 1)
            if inner is not None:
                return inner
    return f"{name} ({_type_name(value)}) cannot be pickled: {error}"


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _function_parts(function: types.FunctionType) -> list[tuple[str, Any]]:
    """What a function defined in a cell carries when it travels by value: the globals its code
    names, the variables it closes over and its defaults, each labelled for a message."""
    owner = getattr(function, "__qualname__", "the function")
    parts = [
        (f"closure variable `{var}` of {owner}", cell.cell_contents)
        for var, cell in zip(
            function.__code__.co_freevars, function.__closure__ or (), strict=False
        )
        if _has_contents(cell)
    ]
    namespace = function.__globals__
    parts += [
        (f"global `{name}` used by {owner}", namespace[name])
        for name in _global_names(function.__code__)
        if name in namespace
    ]
    parts += [(f"a default of {owner}", d) for d in function.__defaults__ or ()]
    return parts


def _global_names(code: types.CodeType) -> list[str]:
    """The names a code object (and the code nested in it) may read as globals, in order."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [n for n in _global_names(const) if n not in names]
    return names


def _has_contents(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a variable not yet assigned
        return False
    return True


def _children(value: Any, name: str):
    if isinstance(value, types.FunctionType):
        return _function_parts(value)
    if isinstance(value, dict):
        return [(f"{name}[{k!r}]", v) for k, v in list(value.items())[:100]]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [(f"{name}[{i}]", v) for i, v in enumerate(list(value)[:100])]
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f"{name}.{k}", v) for k, v in list(attrs.items())[:100]]
    return []


def unpicklable_part(function: Any, args: tuple) -> str | None:
    """What of the function and its arguments cannot travel by value, or None."""
    problem = find_unpicklable(function, "function")
    for index, arg in enumerate(args):
        if problem is not None:
            break
        problem = find_unpicklable(arg, f"args[{index}]")
    return problem


def check_picklable(function: Any, args: tuple, advice: str) -> None:
    """Where everything travels by value (spawn, xla): name the argument that cannot, and add
    ``advice`` (why it must pickle, what to do)."""
    problem = unpicklable_part(function, args)
    if problem is not None:
        raise TypeError(f"{problem}. {advice}")


def kernel_findings(plan: LaunchPlan) -> list[Finding]:
    """What in the kernel's state would break this launch's workers: a device runtime some
    backend finds initialised for the plan's start method, a process group left in the kernel."""
    found = [backend.kernel_hazard(plan.start_method) for backend in all_backends()]
    found.append(process_group_in_kernel(plan))
    return [finding for finding in found if finding is not None]


def run_preflight(function: Any, args: tuple, plan: LaunchPlan) -> LaunchPlan:
    """Check the kernel and what travels to the workers; return the plan to run.

    With ``start_method="auto"``, a kernel state that only breaks forked workers switches the
    plan to spawn (saying so in one line) when the function and its arguments can travel by value.

    Raises:
        PreflightError: the kernel is in a state that would break the workers.
        TypeError: something that must travel by value cannot be pickled (named).
    """
    findings = kernel_findings(plan)
    if findings:
        finding = findings[0]
        if not finding.spawn_avoids or plan.start_method == "spawn":
            raise PreflightError(str(finding))
        problem = unpicklable_part(function, args)
        if problem is None and plan.auto_start_method:
            reason = finding.what.splitlines()[0].split(". ")[0].rstrip(".") + "."
            _notice(f"notebook_launcher: {reason} Starting the workers by spawn instead of fork.")
            return run_preflight(function, args, replace(plan, start_method="spawn"))
        raise PreflightError(f"{finding}\nOr: {_spawn_way_out(problem)}")
    launcher = LAUNCHERS[plan.start_method]
    if launcher.ships_by_value:
        check_picklable(function, args, launcher.pickle_advice)
    return plan


def _spawn_way_out(problem: str | None) -> str:
    if problem is None:
        return (
            "pass start_method='spawn': this function and its arguments can travel by value, so "
            "fresh worker processes can run it. start_method='auto' makes that switch by itself "
            "whenever the kernel has initialised CUDA."
        )
    return (
        "start_method='spawn' would start fresh worker processes, but the function and its "
        f"arguments must then travel by value, and {problem}."
    )


def _notice(text: str) -> None:
    logger.info(text)
    say(text)
