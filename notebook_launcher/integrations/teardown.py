"""A process group destroyed right after a backward pass must not deadlock the worker.

Each collective that DistributedDataParallel starts during ``backward()`` carries a copy of the
Python context (torch stashes it for the autograd threads), and gloo's worker thread releases the
finished collective only once it holds the GIL. If the main thread destroys the process group in
those few milliseconds (``destroy_process_group()`` or ``accelerator.end_training()`` at the end
of training, then the model freed when the function returns), the group's destructor waits for
that thread while holding the GIL: the worker hangs until the stall timeout. In a launched
worker, ``destroy_process_group`` first lets those threads run for a moment.
"""

from __future__ import annotations

import time
from typing import Any

from . import hooks

SETTLE = 0.01  # seconds the main thread leaves the GIL to gloo's threads before destroying


def install(module: Any) -> None:
    """Make ``module.destroy_process_group`` (``torch.distributed.distributed_c10d``) settle first,
    and ``torch.distributed.destroy_process_group`` with it."""

    def make(original: Any) -> Any:
        def destroy_process_group(group: Any = None) -> None:
            time.sleep(SETTLE)  # sleeping releases the GIL
            original(group)

        return destroy_process_group

    if not hooks.wrap_method(module, "destroy_process_group", make):
        return
    import torch.distributed as dist

    if dist.__dict__.get("destroy_process_group") is module.destroy_process_group.__wrapped__:
        hooks.replace(dist, "destroy_process_group", module.destroy_process_group)
