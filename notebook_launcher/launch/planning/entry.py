"""The way into every launch and session: plan the settings, claim the kernel, run the preflight
checks, and give the kernel back when the run is over."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ...backends import Backend
from ..errors import shown_as_argument_errors
from . import exclusive
from .plan import LaunchPlan
from .planner import plan_launch
from .preflight import run_preflight
from .settings import LaunchSettings


@contextlib.contextmanager
def checked_plan(
    function: Callable[..., Any],
    args: tuple,
    settings: LaunchSettings | LaunchPlan,
    describe: Callable[[LaunchPlan], str],
    how_to_end: str = exclusive.LAUNCH_ENDS,
    *,
    backend: Backend | None = None,
    hand_over: bool = False,
) -> Iterator[LaunchPlan]:
    """Plan ``settings`` (a plan made earlier is taken as it is), claim the kernel for the run
    ``describe(plan)`` names, and yield the plan the preflight checks passed.

    The kernel is given back when the block ends; with ``hand_over`` only when it raises, for a
    run that goes on after the block (a background thread or an open session gives it back).
    Planning and preflight errors are shown as errors in the caller's arguments.
    """
    with shown_as_argument_errors():
        plan = (
            settings if isinstance(settings, LaunchPlan) else plan_launch(settings, backend=backend)
        )
    exclusive.claim(describe(plan), how_to_end)
    handed_over = False
    try:
        with shown_as_argument_errors():
            plan = run_preflight(function, args, plan)
        yield plan
        handed_over = hand_over
    finally:
        if not handed_over:
            exclusive.release()


def launch_named(kind: str, function: object) -> Callable[[LaunchPlan], str]:
    """How a ``kind`` ("foreground", "background") launch of ``function`` is named to a later
    caller that finds the kernel busy."""
    return lambda plan: exclusive.describe(kind, function, plan.num_processes)
