"""What counts as progress: how the kernel tells a working rank from a waiting one.

A rank shows progress when it writes output or sends an event (the worker group notes those),
when it computes (its processes used at least ``WORK_CPU_SHARE`` of a core since the last sample,
or moved ``WORK_IO_RATE`` bytes a second through files), or when its Python stack moved between
two samples. Waiting is not progress: a rank blocked in a gloo collective, in the shared-memory
exchange or in ``time.sleep`` uses about 1% of a core (measured: at most 0.01 CPU seconds a
second), and its stack stays where it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from .stacks import locate, main_thread_frames

SAMPLE_EVERY = 0.5  # seconds between samples of each rank's resource use
WORK_CPU_SHARE = 0.1  # CPU seconds per second (of the rank's processes) that count as work
WORK_IO_RATE = 1 << 20  # bytes per second read or written that count as work

# Library code whose line numbers move while it waits (polling loops): only the function counts.
_WAIT_LOOPS = re.compile(r"notebook_launcher/|torch/distributed/")


@dataclass(frozen=True)
class Usage:
    """Totals for one rank's process and its descendants, since they started."""

    cpu: float  # CPU seconds, user and system
    io: int  # bytes read and written (files, pipes)
    rss: int  # resident bytes, now


def measure(pid: int | None) -> Usage | None:
    """The resource use of ``pid`` and every process it started; None once it is gone."""
    if pid is None:
        return None
    try:
        processes = [psutil.Process(p) for p in _tree(pid)]
    except psutil.Error:
        return None
    cpu = 0.0
    io = rss = 0
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                cpu += times.user + times.system
                rss += process.memory_info().rss
                counters = process.io_counters()
                io += getattr(counters, "read_chars", 0) + getattr(counters, "write_chars", 0)
        except (psutil.Error, AttributeError, OSError):
            continue  # a child that just ended, or no I/O accounting here
    return Usage(cpu, io, rss)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, read from ``/proc/<pid>/task/*/children`` (a few small
    reads; psutil's ``children()`` reads every process's ``stat`` on the machine instead)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            if current == pid and not os.path.exists("/proc/self/task"):  # no procfs here
                return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as file:
                    todo.extend(int(child) for child in file.read().split())
            except (OSError, ValueError):
                continue
    return found


class WorkMeter:
    """Samples each rank's resource use and says which ranks worked since the last sample.

    Args:
        probe: ``pid -> Usage | None`` (tests pass a scripted one).
    """

    def __init__(self, probe: Callable[[int | None], Usage | None] = measure) -> None:
        self.probe = probe
        self._last: dict[int, tuple[float, Usage]] = {}  # rank -> (when, usage)
        self.rss: dict[int, int] = {}  # rank -> its last measured resident bytes

    def worked(self, rank: int, pid: int | None, now: float) -> bool:
        """Whether ``rank`` computed (or did I/O) since its previous sample."""
        usage = self.probe(pid)
        if usage is None:
            return False
        if usage.rss > 0:  # a process being torn down (the OOM killer's victim) reads as 0
            self.rss[rank] = usage.rss
        previous = self._last.get(rank)
        self._last[rank] = (now, usage)
        if previous is None:
            return False
        since, before = previous
        elapsed = max(now - since, 1e-3)
        # A descendant that ended takes its CPU time with it: never count backwards.
        cpu = max(0.0, usage.cpu - before.cpu)
        io = max(0, usage.io - before.io)
        return cpu >= WORK_CPU_SHARE * elapsed or io >= WORK_IO_RATE * elapsed

    def forget(self, rank: int) -> None:
        self._last.pop(rank, None)


def stack_signature(stack: str) -> tuple | None:
    """What must change in a rank's main-thread stack for it to count as having moved.

    Every frame's file, function and line, except inside the launcher's and torch.distributed's
    own waiting loops, where only the function counts; None without a main thread. A rank in a
    collective has one signature for as long as it waits there.
    """
    frames = main_thread_frames(stack)
    if not frames:
        return None
    return tuple(
        (file, function, None if _WAIT_LOOPS.search(file.replace("\\", "/")) else line)
        for file, line, function in frames
    )


def waiting_in_collective(stack: str) -> bool:
    """Whether the main thread waits for other ranks (a collective, not the rendezvous)."""
    place = locate(stack)
    return place is not None and place.in_collective and not place.in_rendezvous
