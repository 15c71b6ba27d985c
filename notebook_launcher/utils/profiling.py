"""Profiler settings that build a ``torch.profiler.profile``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from .dataclasses import KwargsHandler
from .validation import check_bool, check_int, check_optional_callable, invalid

PROFILER_ACTIVITIES = ("cpu", "xpu", "mtia", "cuda", "hpu")
SCHEDULE_KEYS = ("wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait")
SCHEDULE_REQUIRED = ("wait", "warmup", "active")


def _activity_available(name: str) -> bool:
    if name in ("cpu", "cuda"):  # as torch, accept CUDA and warn later where there is none
        return True
    module = getattr(torch, name, None)
    return bool(module is not None and module.is_available())


@dataclass
class ProfileKwargs(KwargsHandler):
    """Settings of ``torch.profiler.profile``; :meth:`build` makes the profiler.

    Args:
        activities: what to profile, among "cpu", "cuda", "xpu", "mtia", "hpu" (None: torch's
            default, the CPU plus any accelerator).
        schedule_option: ``torch.profiler.schedule`` settings, keys among "wait", "warmup",
            "active" (required), "repeat", "skip_first", "skip_first_wait" (ints >= 0; "active" >= 1).
        on_trace_ready: called when a trace is ready (e.g. ``tensorboard_trace_handler``).
        record_shapes: record operator input shapes.
        profile_memory: track tensor memory allocation and release.
        with_stack: record source file and line of each operator.
        with_flops: estimate FLOPs of matrix multiplications and convolutions.
        with_modules: record the module hierarchy of each operator.
        output_trace_dir: where an Accelerator's ``profile()`` writes a Chrome trace per process
            (None: none written).

    Raises:
        ValueError, TypeError: a bad activity, schedule key or value, naming it.
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Any = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def __post_init__(self) -> None:
        allowed = "allowed activities are " + ", ".join(map(repr, PROFILER_ACTIVITIES))
        if self.activities is not None:
            if not isinstance(self.activities, (list, tuple)):
                raise invalid(
                    "activities", self.activities, "expected a list; " + allowed, TypeError
                )
            for activity in self.activities:
                if activity not in PROFILER_ACTIVITIES:
                    raise invalid(
                        "activities", self.activities, f"{activity!r} is unknown; {allowed}"
                    )
        if self.schedule_option is not None:
            if not isinstance(self.schedule_option, dict):
                raise invalid("schedule_option", self.schedule_option, "expected a dict", TypeError)
            for key, value in self.schedule_option.items():
                if key not in SCHEDULE_KEYS:
                    raise invalid(
                        "schedule_option",
                        self.schedule_option,
                        f"{key!r} is unknown; keys are " + ", ".join(map(repr, SCHEDULE_KEYS)),
                    )
                check_int(f"schedule_option[{key!r}]", value, 1 if key == "active" else 0)
            missing = [key for key in SCHEDULE_REQUIRED if key not in self.schedule_option]
            if missing:
                raise invalid(
                    "schedule_option",
                    self.schedule_option,
                    "'wait', 'warmup' and 'active' are required (missing "
                    + ", ".join(map(repr, missing))
                    + ")",
                )
        check_optional_callable("on_trace_ready", self.on_trace_ready)
        for name in ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"):
            check_bool(name, getattr(self, name))
        if self.output_trace_dir is not None and not isinstance(
            self.output_trace_dir, (str, os.PathLike)
        ):
            raise invalid(
                "output_trace_dir", self.output_trace_dir, "expected a path or None", TypeError
            )

    def _activity(self, name: str) -> torch.profiler.ProfilerActivity:
        if not _activity_available(name):
            raise ValueError(
                f"activities={self.activities!r} is not valid here: {name!r} devices are not "
                "available on this machine."
            )
        return getattr(torch.profiler.ProfilerActivity, name.upper())

    def build(self) -> torch.profiler.profile:
        """A ``torch.profiler.profile`` with these settings (use it as a context manager).

        Example:
            >>> with ProfileKwargs(activities=["cpu"]).build() as prof:
            ...     model(x)
            >>> print(prof.key_averages().table(row_limit=5))
        """
        activities = None
        if self.activities is not None:
            activities = [self._activity(name) for name in self.activities]
        schedule = None
        if self.schedule_option is not None:
            schedule = torch.profiler.schedule(**self.schedule_option)
        return torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            with_modules=self.with_modules,
        )
