"""A rank that is a Slurm task, as the kernel holds it: sent what to run once it proved who it
is, and lost with its node when Slurm says so."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..remote.links import RemoteHandle

SLURM_SETTLE = 5.0  # seconds a rank stopped from outside waits for srun to say why


@dataclass(eq=False)
class SlurmHandle(RemoteHandle):
    """A rank that is a Slurm task: once it proved who it is, it is sent what to run."""

    start_message: bytes = b""
    lost: bool = False  # its node was lost: its process is out of reach, whatever it does

    def ended_as(self) -> str | None:
        return "lost with its node" if self.lost else super().ended_as()

    def connected(self, conn: Any) -> None:
        super().connected(conn)
        try:
            with self.attempt.send_lock:
                conn.send_bytes(self.start_message)
        except OSError:  # the task is gone already: its end says why
            pass
        self.start_message = b""

    def outside_stop(self) -> str | None:
        # Slurm signals a step's tasks before srun prints why (cancelled, time limit, node
        # failure, memory): wait for its words, a little longer on a busy machine.
        end = time.monotonic() + SLURM_SETTLE
        while True:
            said = self.death()
            if said is not None or self.attempt.srun_done() or time.monotonic() >= end:
                return said
            time.sleep(0.05)
