"""Which processes a test left running, and which sockets this process still listens on: shared
by the leak checks of every test suite."""

from __future__ import annotations

import os

import psutil

# Helpers that live as long as the interpreter that started them, not workers: multiprocessing's
# resource tracker (started on the first spawn) and the shared-memory janitor of a process that
# started workers (see notebook_launcher/launch/processes/janitor.py), which ends with that process.
HELPERS = (
    "resource_tracker",
    os.path.join("notebook_launcher", "launch", "processes", "janitor.py"),
)


def is_helper(proc: psutil.Process) -> bool:
    """Whether ``proc`` is one of the :data:`HELPERS` (psutil.Error if it is gone)."""
    command = " ".join(proc.cmdline())
    return any(helper in command for helper in HELPERS)


def live_descendants(pid: int | None = None) -> list[psutil.Process]:
    """Live descendants of ``pid`` (default: this process), ignoring the :data:`HELPERS`.
    Zombies count as gone."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if child.status() == psutil.STATUS_ZOMBIE or is_helper(child):
                continue
        except psutil.Error:
            continue
        found.append(child)
    return found


def listening(proc: psutil.Process | None = None) -> set[tuple[str, int]]:
    """The ``(address, port)`` pairs ``proc`` (default: this process) listens on."""
    proc = proc or psutil.Process()
    return {
        (c.laddr.ip, c.laddr.port)
        for c in proc.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
