"""Shared fixtures: every test must leave no worker process and no listening port behind."""

from __future__ import annotations

import time

import psutil
import pytest


def leftover_children() -> list[psutil.Process]:
    """Live descendants of this process, ignoring multiprocessing's resource tracker.

    The resource tracker is a single helper Python starts on the first spawn and keeps for the
    life of the interpreter; it is not a worker.
    """
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
        except psutil.Error:
            continue
        found.append(child)
    return found


def listening_ports() -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test if it leaves a child process or a listening socket in this process."""
    ports_before = listening_ports()
    yield
    deadline = time.monotonic() + 2.0
    while leftover_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = leftover_children()
    for proc in left:
        proc.kill()
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"
    new_ports = listening_ports() - ports_before
    assert not new_ports, f"ports left listening: {sorted(new_ports)}"
