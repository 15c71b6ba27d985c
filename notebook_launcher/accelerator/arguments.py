"""The checks of the Accelerator's constructor arguments, each naming the argument it refuses."""

from __future__ import annotations

from typing import Any

from ..data.loaders import check_rng_types as check_loader_rng_types
from ..utils.dataclasses import GradientAccumulationPlugin
from ..utils.kwargs import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from ..utils.validation import check_int, invalid

# Each kwargs handler class, and the Accelerator attribute that holds the one given.
HANDLERS = {
    AutocastKwargs: "autocast_handler",
    DistributedDataParallelKwargs: "ddp_handler",
    GradScalerKwargs: "scaler_handler",
    InitProcessGroupKwargs: "init_handler",
    ProfileKwargs: "profile_handler",
    FP8RecipeKwargs: "fp8_recipe_handler",
}


def check_instance(name: str, value: Any, kind: type) -> Any:
    """``value`` if it is None or a ``kind``, else TypeError."""
    if value is not None and not isinstance(value, kind):
        raise invalid(name, value, f"expected a {kind.__name__} or None", TypeError)
    return value


def read_handlers(handlers: list[Any] | None) -> dict[str, Any]:
    """``kwargs_handlers`` as {attribute: handler or None}, for every handler attribute."""
    found: dict[str, Any] = dict.fromkeys(HANDLERS.values())
    if handlers is None:
        return found
    if not isinstance(handlers, (list, tuple)):
        raise invalid("kwargs_handlers", handlers, "expected a list of handlers", TypeError)
    for handler in handlers:
        attribute = HANDLERS.get(type(handler))
        if attribute is None:
            allowed = ", ".join(cls.__name__ for cls in HANDLERS)
            raise invalid("kwargs_handlers", handler, f"expected instances of {allowed}", TypeError)
        if found[attribute] is not None:
            raise invalid(
                "kwargs_handlers", handlers, f"only one {type(handler).__name__} is allowed"
            )
        found[attribute] = handler
    return found


def check_dynamo(backend: Any) -> str | None:
    """The ``torch.compile`` backend name, or None for no compilation."""
    if backend is None:
        return None
    name = str(backend).lower()
    if not isinstance(backend, str) or not name:
        raise invalid("dynamo_backend", backend, "expected a torch.compile backend name", TypeError)
    return None if name == "no" else name


def accumulation_plugin(steps: Any, plugin: Any) -> GradientAccumulationPlugin:
    """The accumulation settings from ``gradient_accumulation_steps`` or a plugin (not both)."""
    check_int("gradient_accumulation_steps", steps, 1)
    check_instance("gradient_accumulation_plugin", plugin, GradientAccumulationPlugin)
    if plugin is not None:
        if steps != 1:
            raise ValueError(
                f"gradient_accumulation_steps={steps} and a gradient_accumulation_plugin were "
                "both given: set num_steps in the plugin only"
            )
        return plugin
    return GradientAccumulationPlugin(num_steps=steps)


def accelerator_rng_types(rng_types: Any) -> list[str]:
    """The generators synchronised at each epoch (default ``["generator"]``), checked as the
    data loaders check them."""
    checked = check_loader_rng_types(rng_types)
    return ["generator"] if checked is None else checked
