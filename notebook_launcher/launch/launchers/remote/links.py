"""The kernel's side of the ranks' sockets: one listener per attempt (bound to the address the
cluster reaches this kernel on, authenticated with the attempt's secret), and a relay thread that
turns what each rank sends into exactly what a local worker's pipes carry.

Each rank's handle gets local pipes (events, stdout, stderr) and a sentinel like a process's, so
the worker group, the supervisor, the watchdogs and the views read a rank on another machine as
they read a local one. A rank's "process" ends once its run is over (its actor's ``run`` returned
or the actor died, as Ray reports) and everything it sent has been relayed.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import wait
from typing import Any

from ....protocol import remote_link, results
from ....protocol.channel import LineSplitter
from ....protocol.names import STOP_SIGNAL
from ....protocol.results import Received
from ..base import WorkerHandle
from .gate import MAX_PENDING, Gate

logger = logging.getLogger(__name__)
EOF_WAIT = 1.0  # seconds a rank's socket may stay open after Ray reported its end
SILENT_END = "killed after it went silent"  # a rank ended for sending nothing, as errors say


class RemoteProcess:
    """A rank's actor as the worker group sees a process: ``sentinel`` (an fd that becomes
    readable when it ended), ``join``, ``exitcode``.

    It ends when Ray reported the outcome of the rank's run (:meth:`ended`) and the rank's
    socket is closed (:meth:`disconnected`), or :data:`EOF_WAIT` after the outcome (a node gone
    without closing its connections): the group then has every event and line the rank sent
    before it learns that it exited.
    """

    def __init__(self) -> None:
        self.sentinel, self._signal = os.pipe()
        self.exitcode: int | None = None
        self.death: str | None = None  # why it ended, where Ray says more than the code
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._outcome: tuple[int, str | None] | None = None
        self._outcome_at = 0.0
        self._connected = False
        self._disconnected = False
        self.killed = False  # the kernel killed it: what it had still to send does not matter
        self.silent = False  # ended because nothing came from it for too long

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)

    def is_alive(self) -> bool:
        return not self._done.is_set()

    @property
    def known(self) -> bool:
        """Whether Ray has reported how the run ended."""
        return self._outcome is not None

    @property
    def ending(self) -> bool:
        """Its socket closed, and Ray has not reported the end of its run yet (a process that
        died: Ray tells moments later)."""
        return self._disconnected and not self._done.is_set()

    def connected(self) -> None:
        with self._lock:
            self._connected = True

    def disconnected(self) -> None:
        with self._lock:
            self._disconnected = True
            self._settle()

    def ended(self, code: int, death: str | None = None) -> None:
        with self._lock:
            if self._outcome is None:
                self._outcome, self._outcome_at = (code, death), time.monotonic()
            self._settle()

    def overdue(self) -> None:
        """Called regularly: ends a run whose socket stayed open after Ray's report."""
        with self._lock:
            if self._outcome is not None and time.monotonic() - self._outcome_at >= EOF_WAIT:
                self._disconnected = True
                self._settle()

    def _settle(self) -> None:
        if self._done.is_set() or self._outcome is None:
            return
        if self._connected and not self._disconnected and not self.killed:
            return
        self.exitcode, self.death = self._outcome
        os.close(self._signal)  # the sentinel becomes readable
        self._done.set()

    def release(self) -> None:
        with self._lock:
            if not self._done.is_set():
                self._outcome = self._outcome or (-9, None)
                self.exitcode, self.death = self._outcome
                os.close(self._signal)
                self._done.set()
            if self.sentinel >= 0:
                os.close(self.sentinel)
                self.sentinel = -1


class Commands:
    """A session worker's command pipe, as the kernel writes it: a message over its socket."""

    def __init__(self, handle: RemoteHandle) -> None:
        self._handle = handle

    def send_bytes(self, data: bytes) -> None:
        self._handle.link_send(remote_link.COMMAND, data)

    def close(self) -> None:
        pass


@dataclass(eq=False)
class RemoteHandle(WorkerHandle):
    """A rank on another machine: what the kernel reads is local, what it sends goes over the
    rank's socket, and its attempt kills it."""

    attempt: Any = None  # the attempt that started it
    link: Any = None  # the rank's socket once it connected (a multiprocessing Connection)
    writers: tuple = ()  # local write ends: events, stdout, stderr
    heard: float = 0.0  # time.monotonic() of the last message from the rank (heartbeats too)

    @property
    def local_pid(self) -> int | None:
        return None  # its process is on another machine: nothing to measure here

    def link_send(self, tag: bytes, body: bytes) -> None:
        with self.attempt.send_lock:
            link = self.link
            if link is None:
                raise BrokenPipeError(f"rank {self.rank} is not connected")
            try:
                link.send_bytes(tag + body)
            except (OSError, ValueError) as error:
                raise BrokenPipeError(
                    f"rank {self.rank}'s connection is closed ({error})"
                ) from None

    def answer(self, reply: Any) -> bool:
        try:
            self.link_send(remote_link.REPLY, pickle.dumps(reply))
        except BrokenPipeError:
            return False
        return True

    def send_signal(self, signum: int) -> None:
        if self.link is None:
            # Still starting (another rank failed first): no code of the user's runs there yet,
            # so a stop kills its actor at once, and there is no stack to dump.
            if signum == STOP_SIGNAL:
                self.kill()
            return
        try:
            self.link_send(remote_link.SIGNAL, bytes([int(signum)]))
        except BrokenPipeError:
            pass

    def connected(self, conn: Any) -> None:
        """The rank's socket, once it proved who it is."""
        self.link = conn
        self.last_alive = self.heard = time.monotonic()  # the rank's quiet time starts now
        self.process.connected()

    def kill(self) -> None:
        self.attempt.kill(self)

    def receive(self, payload: bytes) -> Received:
        if payload.startswith(remote_link.STORED):  # the value is in Ray's object store: fetch it
            payload = self.attempt.fetch(payload[len(remote_link.STORED) :])
        return results.receive(payload)

    def death(self) -> str | None:
        # A rank killed while its node went down (the kernel's teardown came first, or the
        # node's end showed only after the rank's) is told by the node's state, not by its end.
        return self.attempt.lost_node(self) or self.process.death

    def ending(self) -> bool:
        return self.process.ending

    def ended_as(self) -> str | None:
        return SILENT_END if self.process.silent else None

    def close(self) -> None:
        super().close()
        self.attempt.closed(self)


def new_handle(
    rank: int, local_rank: int, node_rank: int, node: str, attempt: Any, kind: type | None = None
) -> RemoteHandle:
    """A handle (a ``kind``, default :class:`RemoteHandle`) with its local pipes, before the
    rank's process exists."""
    events_r, events_w = Pipe(duplex=False)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    streams = {
        _Reader(out_r): LineSplitter(rank, "stdout"),
        _Reader(err_r): LineSplitter(rank, "stderr"),
    }
    handle = (kind or RemoteHandle)(
        rank=rank,
        local_rank=local_rank,
        process=RemoteProcess(),
        events=events_r,
        streams=streams,
        last_alive=time.monotonic(),
        node_rank=node_rank,
        node=node,
        attempt=attempt,
        writers=(events_w, out_w, err_w),
    )
    return handle


class _Reader:
    """The read end of a local output pipe, as the worker group reads one (``fileno``,
    ``close``, ``closed``)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Relay:
    """The listener of one attempt and the thread that relays its ranks' messages.

    ``handles`` are the ranks expected; a connection is accepted once per rank, after it proved
    it holds ``secret`` (one that does not is closed having received nothing). Connections are
    accepted and authenticated by a :class:`~.gate.Gate`, within its deadline and bound on
    waiting connections (``max_pending``, ``deadline``).
    """

    def __init__(
        self,
        host: str,
        secret: bytes,
        attempt: int,
        handles: list[RemoteHandle],
        max_pending: int = MAX_PENDING,
        deadline: float = remote_link.HANDSHAKE_DEADLINE,
    ):
        self.secret = secret
        self.attempt = attempt
        self.handles = {h.rank: h for h in handles}
        self._wake_r, self._wake_w = os.pipe()
        self._links: dict[Any, RemoteHandle] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._all_joined = threading.Event()
        self.gate = Gate(host, secret, self._admit, max_pending, deadline)
        self.address = self.gate.address
        self._thread = threading.Thread(
            target=self._relay, name="notebook_launcher-relay", daemon=True
        )
        self._thread.start()
        logger.info("listening for the ranks of attempt %d on %s:%d", attempt, *self.address)

    @property
    def refused(self) -> int:
        """Connections that failed the handshake."""
        return self.gate.refused

    def joined(self) -> bool:
        return self._all_joined.is_set()

    def wait_joined(self, timeout: float) -> bool:
        return self._all_joined.wait(timeout)

    def _admit(self, sock: socket.socket, attempt: int, rank: int) -> None:
        """A connection that proved it holds the secret: rank ``rank``'s, if it is expected."""
        with self._lock:
            handle = self.handles.get(rank)
            if self._stopping or attempt != self.attempt or handle is None or handle.link:
                sock.close()
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = remote_link.framed(sock)
            handle.connected(conn)
            self._links[conn] = handle
            if all(h.link is not None for h in self.handles.values()):
                self._all_joined.set()
        os.write(self._wake_w, b"x")

    # -- relaying -----------------------------------------------------------------------------

    def _relay(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                conns = list(self._links)
            try:
                ready = wait([*conns, self._wake_r])
            except (OSError, ValueError):
                continue  # a connection closed meanwhile
            for conn in ready:
                if conn == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                self._read(conn)

    def _read(self, conn: Any) -> None:
        handle = self._links.get(conn)
        if handle is None:
            return
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            self._hang_up(conn, handle)
            return
        handle.heard = time.monotonic()
        tag, body = message[:1], message[1:]
        events_w, out_w, err_w = handle.writers
        try:
            if tag == remote_link.BEAT:
                pass
            elif tag == remote_link.EVENT:
                events_w.send_bytes(body)
            elif tag in (remote_link.STDOUT, remote_link.STDERR):
                _write_all(out_w if tag == remote_link.STDOUT else err_w, body)
            elif tag == remote_link.NODE:  # before it loads the function: what its node has
                handle.attempt.node_heard(handle, body)
        except OSError:  # the group released this rank: nothing reads any more
            pass

    def _hang_up(self, conn: Any, handle: RemoteHandle) -> None:
        with self._lock:
            self._links.pop(conn, None)
        close_writers(handle)
        handle.process.disconnected()

    def close(self) -> None:
        """Stop listening and relaying; every rank's local write ends are closed."""
        with self._lock:
            self._stopping = True
        self.gate.close()
        os.write(self._wake_w, b"x")
        if self._thread is not threading.current_thread():
            self._thread.join(2.0)
        for handle in self.handles.values():
            if handle.link is not None:
                try:
                    handle.link.close()
                except OSError:
                    pass
            close_writers(handle)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)


def close_writers(handle: RemoteHandle) -> None:
    """Close the local write ends of ``handle``'s pipes (the group then reads EOF)."""
    events_w, out_w, err_w = handle.writers or (None, -1, -1)
    handle.writers = ()
    if events_w is None:
        return
    events_w.close()
    for fd in (out_w, err_w):
        try:
            os.close(fd)
        except OSError:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
