"""A rank that runs in a Ray actor, as the kernel holds it: its actor and the actor's run, and
a stop from outside told by its node's state."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..remote.links import RemoteHandle

NODE_SETTLE = 2.0  # seconds a node that sent its ranks SIGTERM may take to show as gone


@dataclass(eq=False)
class RayHandle(RemoteHandle):
    """A rank running in a Ray actor: killing it kills its actor."""

    actor: Any = None
    run: Any = None  # the ObjectRef of the actor's run

    def outside_stop(self) -> str | None:
        # A node shutting down sends its processes SIGTERM before it leaves: the cluster shows
        # it dead moments later.
        end = time.monotonic() + NODE_SETTLE
        while True:
            lost = self.death()
            if lost is not None or time.monotonic() >= end:
                return lost
            time.sleep(0.05)
