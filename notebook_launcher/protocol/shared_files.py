"""Shared-memory files: how they are named after the kernel that owns them, and how a file whose
owner is gone is found and removed (by the owner, its janitor, or any later launch)."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# Shared-memory files (exchange mappings and large results) are named after the kernel that owns
# them: /dev/shm/notebook_launcher-<kernel pid>-<token>.<kernel start>.<pid ns>.<time ns>.
# The workers unlink exchange files at once and the kernel unlinks result files once mapped; the
# kernel removes those of ranks that died first. A kernel that was killed removes nothing: its
# janitor (see launch/processes/janitor.py) removes them once the kernel and its workers are gone, and every
# launch reclaims the files whose owner is gone without one (its janitor killed too): the start
# time (clock ticks since boot, as /proc/<pid>/stat gives it) tells the owner from a later process
# that got its pid, and the namespaces say which processes that pid and start time refer to (a
# container sharing /dev/shm has its own). Where /proc cannot tell, the name stops after the token
# and no launch but the owner's own removes the file.
SHARED_MEMORY_DIRECTORY = "/dev/shm"
SHARED_MEMORY_PREFIX = "notebook_launcher-"
_PROC = "/proc"
_DEAD = 0  # the start time in names written for an owner that was already gone


@dataclass(frozen=True)
class Owner:
    """Who a shared-memory file belongs to, as its name says."""

    pid: int
    start: int | None = None  # None: a name without the owner's start time and namespaces
    scope: str | None = None  # the namespaces the pid and the start time belong to


def _scope() -> str | None:
    """This process's pid and time namespaces ("<pid ns>.<time ns>"), or None without /proc
    (or with the /proc of other namespaces, whose pids are not this process's)."""
    try:
        if os.readlink(os.path.join(_PROC, "self")) != str(os.getpid()):
            return None
    except OSError:
        return None
    inodes = []
    for kind in ("pid", "time"):
        try:
            inodes.append(os.stat(os.path.join(_PROC, "self", "ns", kind)).st_ino)
        except FileNotFoundError:
            if kind == "pid":
                return None
            inodes.append(0)  # a Linux older than time namespaces: everyone shares the clock
        except OSError:
            return None
    return ".".join(str(inode) for inode in inodes)


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when no live process has
    that pid; a zombie (dead, not yet reaped) counts as gone. Raises OSError when /proc cannot
    tell (out of file descriptors, say): only a certain death may cost an owner its files."""
    try:
        with open(os.path.join(_PROC, str(pid), "stat"), "rb") as file:
            stat = file.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: fields are counted after it.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        state, start = fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        raise OSError(f"unexpected /proc/{pid}/stat: {stat[:200]!r}") from None
    if state in (b"Z", b"X") and _finished(pid):
        return None
    return start


def _finished(pid: int) -> bool:
    """Whether the zombie ``pid`` has no thread left: a process whose first thread ended while
    others run shows as a zombie too."""
    try:
        return len(os.listdir(os.path.join(_PROC, str(pid), "task"))) <= 1
    except (FileNotFoundError, ProcessLookupError):
        return True  # reaped meanwhile


def owner_of(name: str) -> Owner | None:
    """The owner a file name in /dev/shm gives, or None when it is not one of this package's."""
    if not name.startswith(SHARED_MEMORY_PREFIX):
        return None
    pid_text, _, rest = name[len(SHARED_MEMORY_PREFIX) :].partition("-")
    if not pid_text.isdigit() or not rest:
        return None
    parts = rest.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
        return Owner(int(pid_text), int(parts[1]), f"{parts[2]}.{parts[3]}")
    return Owner(int(pid_text))


def owner_now(pid: int) -> Owner:
    """Process ``pid`` as the name of a file it owns records it (seen from this process now)."""
    scope = _scope()
    if scope is None:
        return Owner(pid)
    try:
        start = process_start(pid)
    except OSError:
        return Owner(pid)  # a name no other launch removes
    # A worker that outlives its kernel for a moment names its last files so that any launch
    # may reclaim them.
    return Owner(pid, _DEAD if start is None else start, scope)


def file_name(owner: Owner, token: str) -> str:
    """The name in /dev/shm of a file of ``owner``; ``token`` tells it from the owner's others."""
    name = f"{SHARED_MEMORY_PREFIX}{owner.pid}-{token}"
    if owner.start is None or owner.scope is None:
        return name
    return f"{name}.{owner.start}.{owner.scope}"


def shared_memory_path(owner_pid: int, token: str) -> str:
    """The path of a new exchange file of the job whose kernel is process ``owner_pid``."""
    return os.path.join(SHARED_MEMORY_DIRECTORY, file_name(owner_now(owner_pid), token))


def _mine(owner: Owner | None, owner_pid: int, scope: str | None) -> bool:
    """Whether ``owner`` is process ``owner_pid`` of this process's namespaces (any namespaces
    where this process cannot tell its own)."""
    if owner is None or owner.pid != owner_pid:
        return False
    return scope is None or owner.scope in (None, scope)


def leftover_files(owner_pid: int) -> list[str]:
    """Paths of the exchange files created in a job launched by process ``owner_pid``."""
    try:
        names = os.listdir(SHARED_MEMORY_DIRECTORY)
    except OSError:
        return []
    scope = _scope()
    return [
        os.path.join(SHARED_MEMORY_DIRECTORY, n)
        for n in names
        if _mine(owner_of(n), owner_pid, scope)
    ]


def remove(path: str) -> None:
    """Delete ``path`` if it is still there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_leftovers(owner_pid: int) -> None:
    """Delete the exchange files of jobs launched by ``owner_pid`` (after its workers ended)."""
    for path in leftover_files(owner_pid):
        remove(path)


def orphaned(owner: Owner, scope: str | None) -> bool:
    """Whether ``owner`` is certainly gone: its name has a start time and namespaces, those are
    ``scope`` (this process's), and no live process has its pid and start time."""
    if owner.start is None or scope is None or owner.scope != scope:
        return False
    if owner.start == _DEAD:
        return True
    try:
        return process_start(owner.pid) != owner.start
    except OSError:
        return False


def owner_gone(path: str) -> bool:
    """Whether the kernel a shared-memory file is named after is certainly gone."""
    owner = owner_of(os.path.basename(path))
    return owner is not None and orphaned(owner, _scope())


def reclaim_orphans() -> int:
    """Delete the shared-memory files of kernels that ended without removing them (killed with
    results or an exchange in flight); the bytes freed. Cheap (one listing of /dev/shm) and never
    raises: a launch goes on whatever is left there."""
    freed = 0
    try:
        scope = _scope()
        if scope is None:
            return 0
        uid = os.geteuid()
        gone: dict[Owner, bool] = {}  # one look at /proc per owner
        with os.scandir(SHARED_MEMORY_DIRECTORY) as entries:
            for entry in entries:
                owner = owner_of(entry.name)
                if owner is None:
                    continue
                if owner not in gone:
                    gone[owner] = orphaned(owner, scope)
                if gone[owner]:
                    freed += _reclaim(entry, uid)
    except Exception:  # housekeeping: the launch must not fail on it
        logger.debug("reclaiming shared-memory files failed", exc_info=True)
    if freed:
        logger.info("removed %d bytes of shared memory left by kernels that are gone", freed)
    return freed


def remove_files_of(owner: Owner) -> int:
    """Delete the files named after ``owner``, a kernel that is gone, including those its workers
    named after it once it was gone (see :func:`owner_now`); the bytes freed. Never raises."""
    dead = dataclasses.replace(owner, start=_DEAD)
    freed = 0
    try:
        uid = os.geteuid()
        with os.scandir(SHARED_MEMORY_DIRECTORY) as entries:
            for entry in entries:
                if owner_of(entry.name) in (owner, dead):
                    freed += _reclaim(entry, uid)
    except OSError:
        pass
    return freed


def _reclaim(entry: os.DirEntry, uid: int) -> int:
    """Delete one orphaned file: a regular file of this user only (root could delete anyone's,
    and another user's kernel may hide from /proc); the bytes freed."""
    try:
        stat = entry.stat(follow_symlinks=False)
        if not entry.is_file(follow_symlinks=False) or stat.st_uid != uid:
            return 0
        os.unlink(entry.path)
    except OSError:
        return 0
    return stat.st_blocks * 512  # what the file held in memory, not its (sparse) size


def create_file(owner_pid: int, token: str, size: int) -> str | None:
    """A new shared-memory file of ``size`` bytes for the job of kernel ``owner_pid``, its pages
    reserved now (so a full ``/dev/shm`` fails here, not with SIGBUS at the first write through a
    mapping); None when there is no room or the kernel is already gone (a launch may have
    reclaimed its files, so this one would stay)."""
    path = shared_memory_path(owner_pid, token)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        remove(path)
        return None
    finally:
        os.close(fd)
    if owner_gone(path):
        remove(path)
        return None
    return path
