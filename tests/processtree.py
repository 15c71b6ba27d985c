"""Which processes a test left running: shared by the leak checks of every test suite."""

from __future__ import annotations

import psutil


def live_descendants(pid: int | None = None) -> list[psutil.Process]:
    """Live descendants of ``pid`` (default: this process), ignoring the resource tracker.

    multiprocessing's resource tracker is a single helper Python starts on the first spawn and
    keeps for the life of the interpreter; it is not a worker. Zombies count as gone.
    """
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
        except psutil.Error:
            continue
        found.append(child)
    return found
