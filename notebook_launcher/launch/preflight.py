"""Cheap checks run in the kernel before any worker starts.

Each check returns None or a :class:`Finding` that says what is wrong, why it matters and how to
fix it; :func:`run_preflight` raises on the first finding.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .errors import PreflightError
from .plan import LaunchPlan


@dataclass(frozen=True)
class Finding:
    what: str
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}\nWhy it matters: {self.why}\nHow to fix it: {self.fix}"


def check_function(function: Any) -> None:
    """Raise TypeError unless ``function`` is something the workers can call."""
    if callable(function):
        return
    hint = (
        " If the function was called instead of passed, write "
        "notebook_launcher(train, args=(...)) rather than notebook_launcher(train(...))."
    )
    raise TypeError(
        f"function={_short(function)} is not valid: expected a callable, got "
        f"{type(function).__name__}.{hint}"
    )


def check_args(args: Any) -> tuple:
    if isinstance(args, (tuple, list)):
        return tuple(args)
    raise TypeError(
        f"args={_short(args)} is not valid: expected a tuple of positional arguments, "
        f"got {type(args).__name__} (for one argument write args=(value,))"
    )


def cuda_initialized_in_kernel(plan: LaunchPlan) -> Finding | None:
    if plan.start_method != "fork" or "torch" not in sys.modules:
        return None
    from ..utils.environment import cuda_initialized

    if not cuda_initialized():
        return None
    return Finding(
        what="CUDA has already been initialised in this kernel.",
        why=(
            "forked workers cannot use CUDA once the parent has ('Cannot re-initialize CUDA in "
            "forked subprocess'). Something in an earlier cell touched the GPU: a .cuda() or "
            ".to('cuda') call, torch.cuda.* queries, or an import that does so."
        ),
        fix=(
            "restart the kernel and keep every GPU use inside the launched function, or pass "
            "start_method='spawn' (the function and its arguments are then sent by value)."
        ),
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


def xla_initialized_in_kernel(plan: LaunchPlan) -> Finding | None:
    if plan.device != "xla" or "torch_xla" not in sys.modules:
        return None
    from .xla_env import xla_initialized

    if not xla_initialized():
        return None
    return Finding(
        what="The XLA runtime has already been started in this kernel.",
        why=(
            "xmp.spawn refuses to start replicas once the parent has used an XLA device, and "
            "every later launch fails the same way until the kernel restarts. Something in an "
            "earlier cell touched the device: torch_xla.device(), xm.xla_device(), a tensor "
            "moved to it, or torch_xla.runtime queries such as world_size()."
        ),
        fix=(
            "restart the kernel and keep every XLA device use inside the launched function "
            "(importing torch_xla in the notebook is fine)."
        ),
    )


KERNEL_CHECKS = (cuda_initialized_in_kernel, process_group_in_kernel, xla_initialized_in_kernel)


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
    return f"{name} ({type(value).__name__}) cannot be pickled: {error}"


def _children(value: Any, name: str):
    if isinstance(value, dict):
        return [(f"{name}[{k!r}]", v) for k, v in list(value.items())[:100]]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [(f"{name}[{i}]", v) for i, v in enumerate(list(value)[:100])]
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f"{name}.{k}", v) for k, v in list(attrs.items())[:100]]
    return []


# Why the function and its arguments must pickle, and what to do, for each start method.
_PICKLE_ADVICE = {
    "spawn": (
        "With start_method='spawn' the function and every argument are sent to the workers by "
        "value; pass something picklable (or create the object inside the function), or use "
        "start_method='fork', which inherits them."
    ),
    "xla": (
        "On XLA devices torch_xla's xmp.spawn pickles the function and its arguments to start "
        "the replicas, even though it forks them, so nothing is inherited; notebook_launcher "
        "sends them with cloudpickle, which carries functions, lambdas and classes defined in "
        "the notebook by value but not locks, open files, sockets, threads or processes. Pass "
        "something picklable instead (a path, a config, plain tensors) and create the object "
        "inside the function; start_method does not change this on XLA."
    ),
}


def check_picklable(function: Any, args: tuple, start_method: str = "spawn") -> None:
    """Where everything travels by value (spawn, xla): name the argument that cannot."""
    problem = find_unpicklable(function, "function")
    for index, arg in enumerate(args):
        if problem is not None:
            break
        problem = find_unpicklable(arg, f"args[{index}]")
    if problem is not None:
        raise TypeError(f"{problem}. {_PICKLE_ADVICE.get(start_method, _PICKLE_ADVICE['spawn'])}")


def run_preflight(function: Any, args: tuple, plan: LaunchPlan) -> None:
    for check in KERNEL_CHECKS:
        finding = check(plan)
        if finding is not None:
            raise PreflightError(str(finding))
    if plan.start_method in _PICKLE_ADVICE:  # both send the function by value
        check_picklable(function, args, plan.start_method)


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
