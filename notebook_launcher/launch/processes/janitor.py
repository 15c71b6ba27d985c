"""The janitor: a kernel's shared-memory files are removed as soon as the kernel dies, however it
dies, with no later launch needed.

Workers write large results (and the exchange of the shared-memory collectives) into files in
``/dev/shm`` named after their kernel (see :mod:`...protocol.shared_files`); the kernel maps and unlinks
them. A kernel that is SIGKILLed removes nothing, and its workers die with it at once
(``PR_SET_PDEATHSIG`` sends them SIGKILL): that is what makes sure no worker outlives its kernel,
even one stuck in C code, so the workers cannot clean up either. A third process does.

One janitor per kernel, started with its first worker, waits on a pipe whose only writer is the
kernel (a child forked from the kernel closes its copy at once, see :func:`_forget`); the kernel
tells it the pid of every worker it starts. When the pipe ends, the kernel is gone: the janitor
removes the kernel's files, waits until those workers are gone as well (they are being killed, and
a file one was creating may appear meanwhile), removes what appeared, and exits. A kernel that
ends normally ends its janitor the same way, with nothing left to remove.

The janitor runs in an interpreter of its own (``-I -S``: no site-packages, nothing of the
kernel's environment, only the descriptors it is given) and imports nothing of this package but
:mod:`...protocol.shared_files`, loaded by path: the package imports torch, and the janitor must start in
milliseconds and hold almost no memory.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

if __name__ != "__main__":  # the janitor process loads it by path instead (see _load_shared_files)
    from ...protocol import shared_files

logger = logging.getLogger(__name__)

WORKERS_LIMIT = 60.0  # seconds: how long the janitor waits for a worker that does not die
POLL = 0.005  # seconds between its looks at the workers
SETTLE = 0.05  # seconds: then once more, for what the workers' own children were creating
PRUNE_FROM = 64  # pids watched before the gone ones are first dropped (see _prune)

_lock = threading.Lock()
_janitor: subprocess.Popen | None = None
_pipe: int | None = None  # the write end, in the kernel only
_kernel = 0  # the pid of the process that started _janitor
_watched: dict[int, int] = {}  # worker pid -> its start time, sent to the janitor
_prune_at = PRUNE_FROM


def watch(*pids: int) -> None:
    """Have this process's janitor (started now if there is none) wait for the workers ``pids``
    before its last look, should this process die. A launch tells it about all its workers at
    once, once they are started: each line written wakes the janitor, which then competes with
    the kernel and the starting workers for the CPU. Never raises: the janitor is housekeeping,
    and a launch reclaims the files of kernels that died without one (see
    ``shared_files.reclaim_orphans``)."""
    started: dict[int, int] = {}
    for pid in pids:
        try:
            start = shared_files.process_start(pid)
        except OSError:
            continue
        if start is not None:  # None: already gone, it names no more files after this kernel
            started[pid] = start
    if not started:
        return
    global _prune_at
    with _lock:
        _prune_at = _prune(_watched, _prune_at)
        _watched.update(started)
        if not _running():
            _start()  # tells it every pid watched so far
        else:
            _send("".join(f"{pid} {start}\n" for pid, start in started.items()))


def start() -> None:
    """Start this process's janitor now if none runs (a kernel does so right after the package's
    import, in the background, so that its first launch does not pay for it)."""
    with _lock:
        if not _running():
            _start()


def _prune(workers: dict[int, int], limit: int) -> int:
    """Drop the workers that are gone from ``workers`` once it holds ``limit`` or more; return
    the next limit. Looking only when the count doubled keeps each watch O(1) on average (a look
    per watch made a launch of 64 ranks read /proc about 2,000 times, in the kernel and here)."""
    if len(workers) < limit:
        return limit
    for known in [p for p, s in workers.items() if _gone(p, s)]:
        del workers[known]
    return max(PRUNE_FROM, 2 * len(workers))


def _gone(pid: int, start: int) -> bool:
    try:
        return shared_files.process_start(pid) != start
    except OSError:
        return False


def _running() -> bool:
    return _janitor is not None and _kernel == os.getpid() and _janitor.poll() is None


def _start() -> None:
    global _janitor, _pipe, _kernel
    if _pipe is not None:
        os.close(_pipe)
        _pipe = None
    owner = shared_files.owner_now(os.getpid())
    read, write = os.pipe()
    try:
        _janitor = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), *_owner_args(owner)],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,  # no interrupt aimed at the kernel's process group
        )
    except Exception:
        logger.debug("the shared-memory janitor did not start", exc_info=True)
        os.close(write)
        return
    finally:
        os.close(read)
    _pipe, _kernel = write, os.getpid()
    os.set_blocking(write, False)  # a janitor that stopped reading never blocks a launch
    _send("".join(f"{pid} {start}\n" for pid, start in _watched.items()))


def _owner_args(owner) -> list[str]:
    return [str(owner.pid), "" if owner.start is None else str(owner.start), owner.scope or ""]


def _send(text: str) -> None:
    try:
        os.write(_pipe, text.encode())
    except OSError:  # full (a janitor that stopped reading) or broken (one that was killed)
        logger.debug("the shared-memory janitor did not take %r", text, exc_info=True)


def _forget() -> None:
    """In a child forked from the kernel: close the kernel's end of the pipe, so that the pipe
    ends with the kernel, not with the last of its children."""
    global _pipe, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    if _pipe is not None:
        try:
            os.close(_pipe)
        except OSError:
            pass
        _pipe = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


# -- the janitor process ---------------------------------------------------------------------


def _load_shared_files():
    """The package's ``protocol/shared_files.py``, loaded without the package (which imports
    torch)."""
    import importlib.util

    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(package, "protocol", "shared_files.py")
    spec = importlib.util.spec_from_file_location("notebook_launcher_shared_files", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _serve(pid: str, start: str, scope: str) -> None:
    owner = shared_files.Owner(int(pid), int(start) if start else None, scope or None)
    workers: dict[int, int] = {}
    limit = PRUNE_FROM
    with os.fdopen(0, "rb") as pipe:
        for line in pipe:  # until the kernel is gone
            worker, _, started = line.decode().partition(" ")
            workers[int(worker)] = int(started)
            limit = _prune(workers, limit)
    # Frees the memory now; the workers may hold it a moment more.
    shared_files.remove_files_of(owner)
    end = time.monotonic() + WORKERS_LIMIT
    while time.monotonic() < end and not all(_gone(p, s) for p, s in workers.items()):
        time.sleep(POLL)
    shared_files.remove_files_of(owner)
    time.sleep(SETTLE)
    shared_files.remove_files_of(owner)


if __name__ == "__main__":
    shared_files = _load_shared_files()
    _serve(*sys.argv[1:4])
