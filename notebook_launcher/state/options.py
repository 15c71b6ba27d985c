"""The keyword arguments ``PartialState`` accepts besides ``cpu``, checked in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..utils.environment import parse_flag_from_env
from ..utils.kwargs import InitProcessGroupKwargs, KwargsHandler
from ..utils.validation import check_bool, check_optional_str, invalid

PROCESS_GROUP_KEYS = ("backend", "init_method", "timeout", "pg_options", "device_id")
OTHER_KEYS = ("debug", "kwargs_handlers")


@dataclass(frozen=True)
class StateOptions:
    """Validated ``PartialState`` keyword arguments."""

    debug: bool
    process_group: dict[str, Any] = field(default_factory=dict)

    @property
    def backend(self) -> str | None:
        return self.process_group.get("backend")


def _handler_kwargs(handlers: Any) -> dict[str, Any]:
    """The process-group settings among ``kwargs_handlers`` (other handlers are not ours)."""
    if not isinstance(handlers, (list, tuple)) or not all(
        isinstance(h, KwargsHandler) for h in handlers
    ):
        raise invalid(
            "kwargs_handlers",
            handlers,
            "expected a list of KwargsHandler objects such as InitProcessGroupKwargs(...)",
            TypeError,
        )
    found = [h for h in handlers if isinstance(h, InitProcessGroupKwargs)]
    if len(found) > 1:
        raise invalid("kwargs_handlers", handlers, "pass at most one InitProcessGroupKwargs")
    return found[0].to_kwargs() if found else {}


def parse_state_options(kwargs: dict[str, Any]) -> StateOptions:
    """Check ``PartialState(**kwargs)``.

    Accepted: the ``torch.distributed.init_process_group`` settings ``backend``,
    ``init_method``, ``timeout``, ``pg_options`` and ``device_id`` (as
    ``InitProcessGroupKwargs(...).to_kwargs()`` gives them); ``kwargs_handlers``, a list that
    may hold one ``InitProcessGroupKwargs``; and ``debug``.

    Raises:
        TypeError: an unknown keyword or a value of the wrong type, naming it.
        ValueError: the same setting given twice.
    """
    unknown = sorted(set(kwargs) - set(PROCESS_GROUP_KEYS) - set(OTHER_KEYS))
    if unknown:
        raise TypeError(
            f"PartialState() got unexpected keyword argument(s) {', '.join(unknown)}: allowed "
            f"are cpu, {', '.join(OTHER_KEYS + PROCESS_GROUP_KEYS)}"
        )
    group = {k: v for k, v in kwargs.items() if k in PROCESS_GROUP_KEYS}
    from_handlers = _handler_kwargs(kwargs.get("kwargs_handlers", []))
    twice = sorted(set(group) & set(from_handlers))
    if twice:
        raise ValueError(
            f"{', '.join(twice)} given both as a keyword and in kwargs_handlers: give it once"
        )
    group.update(from_handlers)
    group = {k: v for k, v in group.items() if v is not None}
    check_optional_str("backend", group.get("backend"))
    check_optional_str("init_method", group.get("init_method"))
    timeout = group.get("timeout")
    if timeout is not None and not isinstance(timeout, timedelta):
        raise invalid("timeout", timeout, "expected a datetime.timedelta or None", TypeError)
    debug = kwargs.get("debug")
    debug = parse_flag_from_env("ACCELERATE_DEBUG_MODE") if debug is None else debug
    return StateOptions(debug=check_bool("debug", debug), process_group=group)
