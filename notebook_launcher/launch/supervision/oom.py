"""Telling a rank killed for lack of memory from any other SIGKILL.

Linux counts the processes its out-of-memory killer ends: system-wide in ``/proc/vmstat``
(``oom_kill``, which includes kills inside memory cgroups) and per cgroup (v2 ``memory.events``,
v1 ``memory.oom_control``). The kernel reads the counters when a launch starts; a rank that then
dies of a SIGKILL the launcher did not send while a counter rose was killed for memory.
"""

from __future__ import annotations

import re
import signal

VMSTAT = "/proc/vmstat"
_CGROUP_FILES = (
    "/sys/fs/cgroup/memory.events",  # cgroup v2, the process's own cgroup as the root
    "/sys/fs/cgroup/memory/memory.oom_control",  # cgroup v1
)
_COUNTER = re.compile(r"^oom_kill (\d+)$", re.MULTILINE)


def oom_kills() -> tuple[int, ...]:
    """The out-of-memory kill counters readable here (a tuple, to compare; empty if none)."""
    found = []
    for path in (VMSTAT, *_CGROUP_FILES):
        try:
            with open(path, encoding="ascii") as file:
                match = _COUNTER.search(file.read())
        except OSError:
            continue
        if match:
            found.append(int(match.group(1)))
    return tuple(found)


def killed_for_memory(exitcode: int | None, before: tuple[int, ...]) -> bool | None:
    """Whether a rank that exited with ``exitcode`` was killed by the out-of-memory killer,
    given the counters read before the launch: True, False, or None when it cannot be told
    (a SIGKILL, but no counter is readable here)."""
    if exitcode != -signal.SIGKILL:
        return False
    after = oom_kills()
    if not after or len(after) != len(before):
        return None
    return any(now > then for now, then in zip(after, before, strict=True))


def memory_text(rss: int | None) -> str:
    """'2.4 GiB' for a size in bytes."""
    if rss is None:
        return "unknown"
    size = float(rss)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
