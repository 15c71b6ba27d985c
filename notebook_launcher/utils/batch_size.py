"""Retrying with smaller batches after an out-of-memory error, and releasing memory.

``find_executable_batch_size`` and ``release_memory`` behave as Accelerate documents them
(``accelerate.utils``): the decorated function gets the batch size as its first argument, and
is called again with 90% of it (or what ``reduce_batch_size_fn`` returns) each time it runs out
of memory.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

from .validation import check_int, invalid

# What the allocators of CUDA/HIP/XPU, MPS, the CPU and cuDNN put in their RuntimeError when
# memory runs out: the errors a smaller batch can avoid.
_OUT_OF_MEMORY = (
    " out of memory.",
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
)


def should_reduce_batch_size(exception: BaseException) -> bool:
    """Whether ``exception`` is an out-of-memory error (or cuDNN's refusal) of a device or the CPU."""
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        message = exception.args[0]
        return isinstance(message, str) and any(s in message for s in _OUT_OF_MEMORY)
    return False


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Give the cached blocks of this process's accelerators back (and collect garbage first).

    Only devices already initialised are touched: initialising one here (CUDA in a forked
    worker) could fail.
    """
    import torch

    if garbage_collection:
        gc.collect()
    for name in ("cuda", "xpu"):
        module = getattr(torch, name, None)
        initialised = getattr(module, "is_initialized", None)
        if callable(initialised) and initialised():
            module.empty_cache()
    mps = getattr(torch, "mps", None)
    if torch.backends.mps.is_available() and hasattr(mps, "empty_cache"):
        mps.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Forget ``objects``, collect garbage and empty the device caches.

    Returns:
        As many Nones as ``objects``: assign them back (``a, b = release_memory(a, b)``) so
        that your names no longer hold the objects.
    """
    released: list[Any] = list(objects)
    for i in range(len(released)):
        released[i] = None
    clear_device_cache(garbage_collection=True)
    return released


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Run ``function(batch_size, *args, **kwargs)``, smaller each time memory runs out.

    A decorator (with or without arguments). The batch size starts at ``starting_batch_size``;
    after an out-of-memory error (:func:`should_reduce_batch_size`) memory is released and it
    becomes 90% of itself (rounded down) or, with ``reduce_batch_size_fn``, what that function
    (no arguments) returns. The size reached is kept for the next call. Other errors are raised.

    Args:
        function: the function; its first parameter receives the batch size.
        starting_batch_size: the first size tried.
        reduce_batch_size_fn: returns the next size to try.

    Returns:
        The decorated function, called without the batch size.

    Raises:
        TypeError: the decorated function is called with the batch size too.
        RuntimeError: the batch size reached zero.

    Example:
        >>> @find_executable_batch_size(starting_batch_size=64)
        ... def train(batch_size, model):
        ...     loader = DataLoader(dataset, batch_size=batch_size)
        ...     ...
        >>> train(model)

    Note:
        In a job of several processes each process finds its own size: one that runs out of
        memory shrinks alone, as in Accelerate.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    if not callable(function):
        raise invalid("function", function, "expected a callable", TypeError)
    batch_size = check_int("starting_batch_size", starting_batch_size, 0)
    if reduce_batch_size_fn is None:

        def reduce_batch_size_fn() -> int:
            return int(batch_size * 0.9)

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        parameters = list(inspect.signature(function).parameters)
        if len(parameters) < len(args) + 1:
            given = ", ".join(f"{n}={v!r}" for n, v in zip(parameters[1:], args[1:], strict=False))
            raise TypeError(
                f"{function.__name__}() got the batch size as an argument, but "
                "find_executable_batch_size passes it: call "
                f"{function.__name__}({given}) without it"
            )
        while True:
            if batch_size == 0:
                raise RuntimeError(
                    "find_executable_batch_size: no batch size fits in memory (reached zero)"
                )
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
            # Out of the except block: the error's traceback, which holds the failed call's
            # tensors, is gone before memory is released.
            clear_device_cache(garbage_collection=True)
            batch_size = reduce_batch_size_fn()

    return run
