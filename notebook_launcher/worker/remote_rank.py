"""A rank on another machine: what its Ray actor runs.

The actor's process runs the same bootstrap as a local worker (the torchrun environment, the
stop signal, fd-level output capture, live tracking, the exit barrier, the session loop), with
one authenticated socket to the kernel (:mod:`notebook_launcher.protocol.remote_link`) where a local
worker has pipes:

* events go over it as they would over the event pipe;
* fds 1 and 2 are pointed at pipes of this process, whose bytes two threads forward over it;
* a control thread reads what the kernel sends: a signal (delivered to the main thread, which
  runs the user's function, so stopping, interrupts and stack dumps work as on one machine) or a
  session command (handed to the session loop through a local pipe).

A return value too large for the socket (over :data:`INLINE_RESULT` bytes pickled) is put into
Ray's object store, and the socket carries only a reference the kernel fetches.

Ray is imported only inside the actor's methods: the kernel makes :class:`RankActor` remote.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import fcntl
import logging
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time
from multiprocessing import Pipe
from multiprocessing.reduction import ForkingPickler
from typing import Any

from ..backends import shared_memory
from ..protocol import remote_link
from ..protocol.channel import READ_CHUNK, EventChannel
from ..protocol.context import set_context
from ..protocol.events import WorkerFinished, WorkerStarted
from ..protocol.names import STACK_DUMP_SIGNAL, STOP_SIGNAL
from ..protocol.node_environment import describe_node
from ..protocol.spec import WorkerSpec
from ..utils.listening import bind_listener, serve_store
from . import exit_barrier, session_loop
from .bootstrap import (
    call_function,
    redirect_streams,
    set_up_process,
    shutdown_process_group,
    take_stdin,
)
from .reporting import flush_streams

logger = logging.getLogger(__name__)
INLINE_RESULT = 1 << 20  # pickled bytes; a larger return value goes through the object store
OUTPUT_FIRST = 0.5  # seconds an event waits for the output written before it to be sent
DRAIN_WAIT = 2.0  # seconds the forwarders get to send the last output once the run ended
# The signals the kernel may ask for (stop, stack dump, a session call's interrupt): the rank's
# process has a handler for each while it runs.
DELIVERED = frozenset({int(STOP_SIGNAL), int(STACK_DUMP_SIGNAL), int(signal.SIGINT)})


def node_address() -> str:
    """The address Ray knows this node by (where the other ranks reach it)."""
    import ray

    return ray.util.get_node_ip_address()


def take_priority(niceness: int) -> int:
    """Run this process's threads at ``niceness`` (the kernel's) if they run below it and the
    node allows raising them (root, ``CAP_SYS_NICE`` or ``RLIMIT_NICE``), unless
    ``RAY_worker_niceness`` was set for this worker; the niceness the main thread has then.

    Ray starts its workers at niceness 15, below every other process of the node, so that
    anything else running there (a notebook's kernel on the head node, a data job) takes the CPU
    from them first; a rank is a training process like any torchrun starts."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current <= niceness or "RAY_worker_niceness" in os.environ:
        return current
    tasks = f"/proc/{os.getpid()}/task"
    threads = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else [0]
    for thread in threads:  # on Linux each thread has its own (new threads inherit it)
        try:
            os.setpriority(os.PRIO_PROCESS, thread, niceness)
        except OSError:  # not allowed here, or the thread just ended: Ray's niceness stays
            pass
    return os.getpriority(os.PRIO_PROCESS, 0)


class RankActor:
    """One rank's Ray actor: made remote by the kernel's launcher, one per rank, in the launch's
    placement group. Its methods run in the actor process's main thread, one at a time."""

    def __init__(self, niceness: int) -> None:
        self._store: Any = None
        take_priority(niceness)

    def host_store(self) -> tuple[str, int]:
        """Host the job's rendezvous store (rank 0's actor), listening on this node's address
        only; every rank connects to it as a client. Its ``(host, port)``."""
        host = node_address()
        self._store = serve_store(bind_listener(host, 0), host)
        return host, self._store.port

    def check(self, modules: tuple[str, ...]) -> Any:
        """What this node lacks of ``modules`` (those loading the function imports), its Python
        and the versions the kernel compares with its own (asked before :meth:`run`)."""
        return describe_node(modules)

    def run(self, *args: Any) -> int:
        """Join the job and run the function (or, in a session, the command loop) with
        :func:`run_worker`'s arguments; the exit code a process would have."""
        return run_worker(*args)


class KernelLink:
    """This rank's end of the socket to the kernel: a thread-safe sender, and a control thread
    that acts on what the kernel sends."""

    def __init__(self, sock: socket.socket, node: str, session: bool, large: Any = None) -> None:
        self._sock = sock
        self.forwarders: list[_Forwarder] = []  # output sent before each event
        self._large = large  # moves a large return value elsewhere (None: over the socket)
        self._conn = remote_link.framed(sock.dup())
        self._lock = threading.Lock()
        self._node = node
        self._closing = False
        self._main = threading.main_thread().ident
        self.commands, self._commands_w = Pipe(duplex=False) if session else (None, None)
        self.replies, self._replies_w = Pipe(duplex=False)  # answers to the rank's prompts
        self._control = threading.Thread(
            target=self._serve, name="notebook_launcher-control", daemon=True
        )
        self._control.start()
        self._beating = threading.Event()
        self._beat = threading.Thread(
            target=self._heartbeat, name="notebook_launcher-beat", daemon=True
        )
        self._beat.start()

    # -- to the kernel ----------------------------------------------------------------------

    def send(self, event: object) -> None:
        """What ``EventChannel`` calls: one event (the node added to ``WorkerStarted``, a large
        return value moved to the object store)."""
        deadline = time.monotonic() + OUTPUT_FIRST
        for forwarder in self.forwarders:
            forwarder.drain(deadline)
        if isinstance(event, WorkerStarted):
            event = dataclasses.replace(event, node=self._node)
        elif (
            isinstance(event, WorkerFinished)
            and self._large is not None
            and len(event.payload) > INLINE_RESULT
        ):
            event = dataclasses.replace(event, payload=self._large(event.payload))
        self.send_bytes(remote_link.EVENT, bytes(ForkingPickler.dumps(event)))

    def send_bytes(self, tag: bytes, body: bytes) -> None:
        with self._lock:
            self._conn.send_bytes(tag + body)

    def _heartbeat(self) -> None:
        """Tell the kernel every :data:`remote_link.BEAT_EVERY` seconds that this rank and its node
        still answer, whatever the rank's main thread is doing."""
        while not self._beating.wait(remote_link.BEAT_EVERY):
            try:
                self.send_bytes(remote_link.BEAT, b"")
            except (OSError, ValueError):
                return

    # -- from the kernel --------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while True:
                message = self._conn.recv_bytes()
                tag, body = message[:1], message[1:]
                if tag == remote_link.SIGNAL and body[0] in DELIVERED:
                    signal.pthread_kill(self._main, body[0])
                elif tag == remote_link.COMMAND and self._commands_w is not None:
                    self._commands_w.send_bytes(body)
                elif tag == remote_link.REPLY:
                    self._replies_w.send_bytes(body)
        except (EOFError, OSError):
            pass
        self._replies_w.close()  # a prompt waiting for its answer ends
        if self._commands_w is not None:
            self._commands_w.close()  # a session loop waiting for a command ends
        if not self._closing:  # the kernel is gone: stop the rank, as a local one dies with it
            try:
                signal.pthread_kill(self._main, STOP_SIGNAL)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        self._closing = True
        self._beating.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the control thread
        except OSError:
            pass
        self._control.join(1.0)
        self._beat.join(1.0)
        for end in (self._conn, self._sock, self.commands, self.replies):
            if end is not None:
                end.close()


def _stored(payload: bytes) -> bytes:
    """A reference to ``payload``, put into Ray's object store, as the kernel receives it."""
    import ray
    import ray.cloudpickle

    return remote_link.STORED + ray.cloudpickle.dumps(ray.put(payload))


class _Forwarder(threading.Thread):
    """Sends what the rank writes to one of its fds to the kernel, as raw bytes."""

    def __init__(self, fd: int, tag: bytes, link: KernelLink) -> None:
        super().__init__(name=f"notebook_launcher-fd{fd}", daemon=True)
        self.read_end, write_end = os.pipe()
        self.write_end = os.fdopen(write_end, "wb")  # redirect_streams moves it onto fd
        self.tag = tag
        self.link = link

    def run(self) -> None:
        self.busy = threading.Lock()  # held from a chunk's read until it is sent
        try:
            while True:
                ready = select.select([self.read_end], [], [])[0]
                with self.busy:
                    chunk = os.read(self.read_end, READ_CHUNK) if ready else b""
                    if not chunk:
                        break
                    self.link.send_bytes(self.tag, chunk)
        except (OSError, ValueError):
            pass
        finally:
            os.close(self.read_end)

    def drain(self, deadline: float) -> None:
        """Until what was written to the fd so far is sent (bounded by ``deadline``,
        ``time.monotonic()``), so that an event sent next comes after it, as on a pipe."""
        busy = getattr(self, "busy", None)
        if busy is None or not self.is_alive():
            return
        while time.monotonic() < deadline:
            try:
                waiting = struct.unpack(
                    "i", fcntl.ioctl(self.read_end, termios.FIONREAD, b"\0" * 4)
                )[0]
            except OSError:
                return
            if not waiting and busy.acquire(blocking=False):
                busy.release()
                return
            time.sleep(0.001)

    def finish(self) -> None:
        """Wait (bounded) until everything written before fds 1 and 2 were restored is sent."""
        if not self.write_end.closed:  # stopped before the fd was redirected
            self.write_end.close()
        if self.ident is not None:
            self.join(DRAIN_WAIT)
        else:  # never started: nothing to send
            os.close(self.read_end)


class _Captured:
    """fds 1 and 2, ``sys.stdout``/``sys.stderr``, the signal handlers and the main thread's
    signal mask of the actor's process as they were before the run, put back after it."""

    def __init__(self) -> None:
        self.fds = {fd: os.dup(fd) for fd in (1, 2)}
        self.streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, sys.excepthook)
        self.handlers = {s: signal.getsignal(s) for s in (STOP_SIGNAL, signal.SIGINT)}
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])

    def restore(self) -> None:
        for sig in self.handlers:  # no stop signal may break what is left to do
            signal.signal(sig, signal.SIG_IGN)
        flush_streams()
        for fd, saved in self.fds.items():
            os.dup2(saved, fd)  # the pipes' last write ends close: the forwarders see EOF
            os.close(saved)
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, sys.excepthook = self.streams
        faulthandler.unregister(STACK_DUMP_SIGNAL)
        faulthandler.enable(file=sys.__stderr__, all_threads=True)
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


def run_worker(
    spec: WorkerSpec,
    payload: Any,
    kernel: tuple[str, int],
    secret: bytes,
    store: tuple[str, int],
    node: str,
    sock: socket.socket | None = None,
    large: Any = _stored,
) -> int:
    """Entry point of every rank on a cluster (the bottom frame of its stacks, as a local
    worker's ``run_worker`` is); its exit code. ``sock``: already joined to the kernel (else
    it connects to ``kernel`` with ``secret``); ``large``: where a large return value goes
    (None: over the socket)."""
    from . import stopping

    context = dataclasses.replace(spec.context, master_addr=store[0], master_port=store[1])
    spec = dataclasses.replace(spec, context=context)
    captured = _Captured()
    # Every signal the kernel may send has its handler before the kernel can send one: a stack
    # request that found SIGUSR1's default action would end the actor's process.
    stopping.stop_on_signal()
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    if spec.session:  # Ray blocks SIGINT in an actor's main thread: a session call's interrupt
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    link: KernelLink | None = None
    forwarders: list[_Forwarder] = []
    code = 1
    try:
        if sock is None:
            sock = remote_link.join_kernel(kernel, secret, context.restart_count, context.rank)
        link = KernelLink(sock, node, spec.session, large)
        forwarders = [
            _Forwarder(1, remote_link.STDOUT, link),
            _Forwarder(2, remote_link.STDERR, link),
        ]
        for forwarder in forwarders:
            forwarder.start()
        link.forwarders = forwarders
        redirect_streams(*(f.write_end for f in forwarders))
        set_up_process(spec)
        channel = EventChannel(link)
        set_context(dataclasses.replace(spec.context, channel=channel))
        take_stdin(context.rank, channel, link.replies.recv)
        if link.commands is not None:
            session_loop.attach(link.commands)
        code = call_function(spec, payload, channel)
        shared_memory.depart()
        if code == 0:
            exit_barrier.wait_for_all_ranks(context.restart_count)
        shutdown_process_group()
    except KeyboardInterrupt:  # stopped before the function ran, or after it reported
        pass
    finally:
        captured.restore()
        set_context(None)
        for forwarder in forwarders:
            forwarder.finish()
        if link is not None:
            link.close()
    return code
