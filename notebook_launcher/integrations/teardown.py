"""A process group destroyed right after a backward pass must not deadlock the worker.

Each collective that DistributedDataParallel starts during ``backward()`` carries a copy of the
Python context (torch stashes it for the autograd threads), and gloo's worker thread releases the
finished collective only once it holds the GIL. If the main thread destroys the process group in
those few milliseconds (``destroy_process_group()`` or ``accelerator.end_training()`` at the end
of training, then the model freed when the function returns), the group's destructor waits for
that thread while holding the GIL: the worker hangs until the stall timeout. In a launched
worker that built a ``DistributedDataParallel`` model, ``destroy_process_group`` first lets those
threads run for a moment (one that never did, which starts no collective from autograd, pays
nothing).
"""

from __future__ import annotations

import time
from typing import Any

from . import hooks

SETTLE = 0.01  # seconds the main thread leaves the GIL to gloo's threads before destroying
_ddp_built = False  # whether this worker built a DistributedDataParallel model


def install(module: Any) -> None:
    """Make ``module.destroy_process_group`` (``torch.distributed.distributed_c10d``) settle first
    once DDP was used, and ``torch.distributed.destroy_process_group`` with it."""

    def destroy_process_group(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
        if _ddp_built:
            time.sleep(SETTLE)  # sleeping releases the GIL
        wrapped(*args, **kwargs)

    if not hooks.wrap_method(module, "destroy_process_group", destroy_process_group):
        return
    import torch.distributed as dist

    if dist.__dict__.get("destroy_process_group") is module.destroy_process_group.__wrapped__:
        hooks.replace(dist, "destroy_process_group", module.destroy_process_group)
    hooks.when_imported("torch.nn.parallel.distributed", _watch_ddp)


def _watch_ddp(module: Any) -> None:
    """Note when the worker builds a ``DistributedDataParallel`` model (subclasses included)."""

    def __init__(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
        global _ddp_built
        _ddp_built = True
        wrapped(*args, **kwargs)

    hooks.wrap_method(module.DistributedDataParallel, "__init__", __init__)
