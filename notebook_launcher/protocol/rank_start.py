"""How a rank that a scheduler started (a Slurm task) learns what to run: the environment names
that lead it to the kernel, and the first message the kernel sends once it proved who it is.

The secret travels in the environment only (never on a command line, which every user of a node
can read); the rank removes it from its environment before the user's code runs.
"""

from __future__ import annotations

import pickle
from typing import Any

KERNEL_ENV = "NOTEBOOK_LAUNCHER_KERNEL"  # "host:port" of the kernel's listener
SECRET_ENV = "NOTEBOOK_LAUNCHER_SECRET"  # the attempt's secret, hex
ATTEMPT_ENV = "NOTEBOOK_LAUNCHER_ATTEMPT"  # the attempt (restart count)
WARNING_ENV = "NOTEBOOK_LAUNCHER_TIME_WARNING"  # seconds Slurm warns before the time limit
TIME_WARNING_SIGNAL = "USR2"  # what Slurm sends the ranks then (sbatch --signal)
START = b"p"  # kernel -> rank, first message: what to run (see :func:`pack`)


def pack(
    spec: Any, payload: Any, store: tuple[str, int], node: str, modules: tuple[str, ...] = ()
) -> bytes:
    """The start message: the rank's spec, the function's payload, the rendezvous store's
    address, the node's label, and the modules loading the payload imports (the rank says
    which its node lacks, and waits for the kernel's go, before loading it)."""
    message = (spec, payload, store, node, tuple(modules))
    return START + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(message: bytes) -> tuple[Any, Any, tuple[str, int], str, tuple[str, ...]]:
    if not message.startswith(START):
        raise ValueError("the kernel's first message was not the start message")
    return pickle.loads(message[len(START) :])
