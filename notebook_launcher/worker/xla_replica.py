"""The two processes between the kernel and an XLA replica: the xmp.spawn helper and the replica.

The kernel starts one helper process, which calls ``xmp.spawn`` (blocking until every replica
is done) so that the kernel keeps supervising. xmp forks the replica processes from the helper;
in each, :func:`run_replica` runs our worker bootstrap once per replica (a replica may be one of
several threads of its process). Each replica talks to the kernel over the pipes the kernel made
for its rank; the helper tells the kernel when a replica's process has exited, and with which
code, over one more pipe per rank.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import sys
import threading
import time
import traceback
from typing import Any

from ..protocol.channel import EventChannel
from ..protocol.context import set_context
from ..protocol.events import WorkerFailed
from ..protocol.names import STACK_DUMP_SIGNAL
from ..protocol.spec import ReplicaGroup
from ..state import reset_state
from ..utils.parent_death import die_with_parent
from ..utils.replicas import use_thread_replicas
from .bootstrap import call_function, flush_streams, redirect_streams, set_up_process, take_stdin

FAILED_REPLICA_LINGER = 30.0  # a failed thread replica waits this long for the kernel to stop it


_GROUP: ReplicaGroup | None = None  # set in the helper, inherited by its replicas
_process_lock = threading.Lock()
_process_ready: list[int] = []  # the ranks whose replica set up this process (first one first)


# -- the helper ------------------------------------------------------------------------------------


def _report_exits(group: ReplicaGroup, pid: int, code: int) -> None:
    while group.hello_r.poll(0):  # a replica that died at once may not have been read yet
        try:
            replica_pid, rank = group.hello_r.recv()
        except (EOFError, OSError):
            break
        group.ranks_of.setdefault(replica_pid, []).append(rank)
    for rank in group.ranks_of.get(pid, []):
        _flag(group, rank, code)


def _flag(group: ReplicaGroup, rank: int, code: int) -> None:
    if rank in group.reported:
        return
    group.reported.add(rank)
    try:
        group.pipes[rank].exited.send(code)
    except OSError:
        pass


def _record_reaped_children(group: ReplicaGroup) -> None:
    """Tell the kernel each replica process's exit code as the helper reaps it.

    The replicas are the helper's children, reaped by xmp's process pool; only the reaper can
    read an exit status, so the helper's ``os.waitpid`` reports what it reaps.
    """
    real_waitpid = os.waitpid
    lock = threading.Lock()

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        done, status = real_waitpid(pid, options)
        if done:
            with lock:
                _report_exits(group, done, os.waitstatus_to_exitcode(status))
        return done, status

    os.waitpid = waitpid


def run_helper(group: ReplicaGroup, payload: bytes) -> None:
    """Entry point of the helper process: ``xmp.spawn`` every replica, then report and exit."""
    global _GROUP
    die_with_parent(group.kernel_pid)
    os.dup2(group.pipes[0].stderr.fileno(), 2)  # the helper's own errors read as rank 0's
    os.dup2(group.pipes[0].stderr.fileno(), 1)
    group.helper_pid = os.getpid()
    _GROUP = group
    _record_reaped_children(group)
    code = 0
    try:
        import torch_xla.distributed.xla_multiprocessing as xmp

        # No nprocs: xmp starts one replica per device (2.5+ refuses other values, and
        # nprocs=1 would run the replica in this process). xmp pickles fn and args even
        # under fork: the user's function travels inside ``payload`` (cloudpickle bytes).
        xmp.spawn(run_replica, args=(payload,), start_method="fork")
    except BaseException as exc:
        code = 1
        if not group.ranks_of:  # no replica ever started: this is the error to show
            sys.stderr.write(
                "notebook_launcher: xmp.spawn failed before any replica started:\n"
                + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            )
            sys.stderr.flush()
    finally:
        _report_exits(group, -1, code)
        for rank in range(len(group.pipes)):
            _flag(group, rank, code)
        os._exit(code)


# -- a replica -------------------------------------------------------------------------------------


def _runtime() -> tuple[int, int, int, int]:
    """(global ordinal, local ordinal, world size, replicas in this process) from torch_xla."""
    import torch_xla.runtime as xr

    try:
        here = int(xr.addressable_device_count())
    except Exception:
        here = 1
    return int(xr.global_ordinal()), int(xr.local_ordinal()), int(xr.world_size()), here


class _ThreadRoutedStream:
    """``sys.stdout``/``sys.stderr`` of a process whose replicas are threads: each replica's
    Python-level output goes to its own rank's pipe, and so does that of the threads it starts
    (see :func:`_inherit_routes`); other threads write to ``default``, the process's stream."""

    def __init__(self, default: Any) -> None:
        self._default = default
        self._local = threading.local()

    def route(self, stream: Any) -> None:
        self._local.stream = stream

    def routed(self) -> Any:
        """The calling thread's own stream, or None."""
        return getattr(self._local, "stream", None)

    def _target(self) -> Any:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            inherited = getattr(threading.current_thread(), "_replica_streams", {})
            stream = self._local.stream = inherited.get(id(self), self._default)
        return stream

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


_THREAD_START = threading.Thread.start


def _start_with_routes(thread: threading.Thread) -> None:
    """``Thread.start`` in a process of thread replicas: the new thread inherits the streams of
    the replica that starts it."""
    streams = [s for s in (sys.stdout, sys.stderr) if isinstance(s, _ThreadRoutedStream)]
    routes = {id(s): s.routed() for s in streams if s.routed() is not None}
    if routes:
        thread._replica_streams = routes  # type: ignore[attr-defined]
    _THREAD_START(thread)


def _inherit_routes() -> None:
    """Make threads started by a replica write their Python-level output where it does."""
    threading.Thread.start = _start_with_routes  # type: ignore[method-assign]


def _setup_process(group: ReplicaGroup, rank: int, here: int) -> None:
    """Once per replica process: parent death, own process group, fd-level output, state.

    Alone in its process, a replica's fds 1 and 2 are its rank's pipes. Several replicas
    (threads) share fds 1 and 2: those go to the process's pipes (shown marked as the whole
    process's), each replica's Python-level streams to its own rank's pipes, and faulthandler's
    reports (of every thread) to the first replica's.
    """
    die_with_parent(group.helper_pid)
    for index, other in enumerate(group.pipes):
        other.exited.close()  # the helper's to write; held here they would hide its reports
        if index != rank or here == 1:
            other.process_stdout.close()
            other.process_stderr.close()
    group.hello_r.close()
    spec = group.specs[rank]
    pipes = group.pipes[rank]
    if here > 1:
        redirect_streams(pipes.process_stdout, pipes.process_stderr)
    else:
        redirect_streams(pipes.stdout, pipes.stderr)
    set_up_process(spec)
    if here > 1:
        use_thread_replicas(True)
        sys.stdout = _ThreadRoutedStream(sys.stdout)
        sys.stderr = _ThreadRoutedStream(sys.stderr)
        _inherit_routes()
        stderr = _route_thread(group, rank)
        faulthandler.enable(file=stderr, all_threads=True)
        faulthandler.register(STACK_DUMP_SIGNAL, file=stderr, all_threads=True, chain=False)


def _route_thread(group: ReplicaGroup, rank: int) -> Any:
    """A thread replica: its own Python-level streams for its rank (returns its stderr)."""
    pipes = group.pipes[rank]
    stream = None
    for routed, conn in ((sys.stdout, pipes.stdout), (sys.stderr, pipes.stderr)):
        stream = open(  # noqa: SIM115
            conn.fileno(), "w", buffering=1, encoding="utf-8", errors="backslashreplace"
        )
        if isinstance(routed, _ThreadRoutedStream):
            routed.route(stream)
    return stream


def run_replica(index: int, payload: bytes) -> None:
    """What xmp.spawn runs for each replica: our worker bootstrap around the user's function."""
    group = _GROUP
    if group is None:
        raise RuntimeError("run_replica runs only in replicas started by notebook_launcher")
    rank, local_rank, world, here = _runtime()
    planned = len(group.specs)
    if not 0 <= rank < planned or world != planned:
        rank = rank if 0 <= rank < planned else 0
        _mismatch(group, rank, world, planned)
    with _process_lock:
        group.hello_w.send((os.getpid(), rank))
        first = not _process_ready
        _process_ready.append(rank)
        if first:
            _setup_process(group, rank, here)
    if not first:
        _route_thread(group, rank)
        reset_state()  # this thread's fresh state
    spec = group.specs[rank]
    channel = EventChannel(group.pipes[rank].events)
    context = dataclasses.replace(
        spec.context, rank=rank, local_rank=local_rank, world_size=world, channel=channel
    )
    set_context(context)
    if first:  # nothing of the kernel's input machinery stays; XLA replicas take no input
        take_stdin(rank, channel, None)
    code = call_function(dataclasses.replace(spec, context=context), payload, channel)
    flush_streams()
    if code:
        # Alone in its process, a failed replica exits like any worker; a thread replica
        # waits for the kernel to stop the whole process (its exit would take its siblings
        # down before they could be told why).
        if here > 1:
            time.sleep(FAILED_REPLICA_LINGER)
        os._exit(code)


def _mismatch(group: ReplicaGroup, rank: int, world: int, planned: int) -> None:

    message = (
        f"xmp.spawn started {world} replicas here, but the launch planned num_processes="
        f"{planned}; xmp always starts one replica per XLA device, so pass "
        f"num_processes={world} (or None)."
    )
    group.pipes[rank].events.send(
        WorkerFailed(
            rank=rank,
            exc_type="ValueError",
            message=message,
            traceback=message,
            payload=None,
            time=time.time(),
        )
    )
    os._exit(1)
