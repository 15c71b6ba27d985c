"""The door of a launch's listener: one thread accepts every connection and authenticates it
without a thread per connection, within a deadline for the whole handshake and a bound on how
many connections wait at once, and hands each one that proved it holds the launch's secret on.

Shared by every launcher whose ranks run on other machines (their ranks connect back to the
kernel): what a hostile or broken client can cost the kernel is bounded here, once.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ....protocol import remote_link

logger = logging.getLogger(__name__)
ACCEPT_BACKLOG = 256
MAX_PENDING = 128  # connections that may wait to authenticate at once
ACCEPT_BATCH = 32  # connections accepted per turn of the accepting thread
ACCEPT_IDLE = 0.5  # seconds the accepting thread waits at most between its looks
ANSWER_WAIT = 1.0  # seconds the kernel's proof (32 bytes) may take to be sent
EXHAUSTED_PAUSE = 0.05  # seconds between tries to accept while no descriptor is free


class Gate:
    """Listens on ``host`` (a free port: :attr:`address`) and calls ``admit(sock, attempt,
    rank)`` from its thread for each connection that proved it holds ``secret``.

    Each connection waits, unauthenticated, at most ``deadline`` seconds in all (a client that
    trickles its bytes is cut off all the same), and at most ``max_pending`` wait at once: the one
    that waited longest is dropped to make room, so that a flood of connections that never
    authenticate cannot keep out a rank, which sends its whole proof as it connects. Running out
    of file descriptors while accepting is kept in :attr:`trouble`, for the launch's error.
    """

    def __init__(
        self,
        host: str,
        secret: bytes,
        admit: Callable[[socket.socket, int, int], None],
        max_pending: int = MAX_PENDING,
        deadline: float = remote_link.HANDSHAKE_DEADLINE,
    ) -> None:
        self.secret = secret
        self.max_pending = max_pending
        self.deadline = deadline
        self._admit = admit
        self.listener = socket.create_server((host, 0), backlog=ACCEPT_BACKLOG)
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()[:2]
        self.refused = 0  # connections that failed the handshake
        self.dropped = 0  # connections closed unauthenticated: too slow, or to make room
        self.most_pending = 0  # the most connections that waited to authenticate at once
        self.trouble: str | None = None  # resources that ran out while accepting
        self._pending: dict[Any, tuple[float, bytearray]] = {}  # in order of acceptance
        self._stopping = False
        self._gate_r, self._gate_w = os.pipe()  # wakes the thread to stop
        self._thread = threading.Thread(
            target=self._accept, name="notebook_launcher-accept", daemon=True
        )
        self._thread.start()

    @property
    def pending(self) -> int:
        """How many connections wait to authenticate now."""
        return len(self._pending)

    def unauthenticated(self) -> str:
        """What the listener got besides its ranks, in one sentence for an error ('' if
        nothing)."""
        count = self.refused + self.dropped
        if not count:
            return ""
        return (
            f"the listener also got {count} connection{'s' if count != 1 else ''} that did not "
            f"prove they hold the launch's secret ({self.refused} refused, {self.dropped} closed "
            f"for not completing the handshake within {self.deadline:g} s or to make room: at "
            f"most {self.max_pending} may wait at once)"
        )

    def close(self) -> None:
        """Stop accepting; every connection still waiting is closed."""
        self._stopping = True
        os.write(self._gate_w, b"x")
        if self._thread is not threading.current_thread():
            self._thread.join(2.0)
        self.listener.close()
        for fd in (self._gate_r, self._gate_w):
            os.close(fd)

    # -- accepting ----------------------------------------------------------------------------

    def _accept(self) -> None:
        chooser = selectors.DefaultSelector()
        chooser.register(self.listener, selectors.EVENT_READ)
        chooser.register(self._gate_r, selectors.EVENT_READ)
        try:
            while not self._stopping:
                now = time.monotonic()
                first = min((at for at, _ in self._pending.values()), default=None)
                wait_for = ACCEPT_IDLE if first is None else max(0.0, first + self.deadline - now)
                try:
                    ready = chooser.select(min(wait_for, ACCEPT_IDLE))
                except (OSError, ValueError):
                    return
                listener_ready = False
                for key, _ in ready:
                    if key.fileobj is self.listener:
                        listener_ready = True
                    elif key.fileobj == self._gate_r:
                        return
                    else:
                        self._hear(chooser, key.fileobj)
                if listener_ready:
                    self._take(chooser)
                self._expire(chooser)
        finally:
            for sock in list(self._pending):
                self._drop(chooser, sock)
            chooser.close()

    def _take(self, chooser: selectors.BaseSelector) -> None:
        """Accept what waits in the listener's backlog (a bounded batch per turn)."""
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as error:
                named = exhausted(error)
                if named is None:  # the listener was closed
                    return
                self.trouble = f"this kernel {named} while accepting the ranks' connections"
                logger.warning("the launch's listener: %s", self.trouble)
                if self._pending:  # make room: the connection waited longest goes
                    self._drop(chooser, next(iter(self._pending)))
                else:
                    time.sleep(EXHAUSTED_PAUSE)  # the backlog keeps them meanwhile
                return
            if len(self._pending) >= self.max_pending:
                self._drop(chooser, next(iter(self._pending)))
            sock.setblocking(False)
            self._pending[sock] = (time.monotonic(), bytearray())
            self.most_pending = max(self.most_pending, len(self._pending))
            chooser.register(sock, selectors.EVENT_READ)
            self._hear(chooser, sock)  # a rank sends its proof as it connects

    def _hear(self, chooser: selectors.BaseSelector, sock: Any) -> None:
        entry = self._pending.get(sock)
        if entry is None:
            return
        hello = entry[1]
        try:
            chunk = sock.recv(remote_link.HELLO_SIZE - len(hello))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.refused += 1
            self._drop(chooser, sock, counted=False)
            return
        hello += chunk
        if len(hello) < remote_link.HELLO_SIZE:
            return
        self._pending.pop(sock)
        chooser.unregister(sock)
        try:
            attempt, rank, answer = remote_link.check_hello(bytes(hello), self.secret)
            sock.settimeout(ANSWER_WAIT)
            sock.sendall(answer)
            sock.settimeout(None)
        except (OSError, ValueError) as error:
            self.refused += 1
            logger.info("refused a connection to the launch's listener: %s", error)
            sock.close()
            return
        self._admit(sock, attempt, rank)

    def _expire(self, chooser: selectors.BaseSelector) -> None:
        """Close the connections that did not authenticate within the deadline."""
        limit = time.monotonic() - self.deadline
        for sock, (at, _) in list(self._pending.items()):
            if at > limit:
                break  # in order of acceptance: the rest are younger
            self._drop(chooser, sock)

    def _drop(self, chooser: selectors.BaseSelector, sock: Any, counted: bool = True) -> None:
        if self._pending.pop(sock, None) is None:
            return
        self.dropped += counted
        try:
            chooser.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()


# Errors that mean a resource ran out rather than a fault of the other end: what each is called.
EXHAUSTION = {
    errno.EMFILE: "ran out of open files (EMFILE, too many open files: the process's limit, "
    "`ulimit -n`, is {limit})",
    errno.ENFILE: "ran out of open files (ENFILE: the machine's limit on open files)",
    errno.ENOBUFS: "ran out of socket buffers (ENOBUFS)",
    errno.ENOMEM: "ran out of memory for sockets (ENOMEM)",
}


def exhausted(error: BaseException) -> str | None:
    """What ran out, if ``error`` (or an error Ray wraps, by its text) says a resource of this
    machine ran out (open files, socket buffers); None for any other error."""
    import resource

    code = getattr(error, "errno", None)
    if code not in EXHAUSTION:
        text = str(error)
        code = next((c for c in EXHAUSTION if os.strerror(c) in text), None)
        if code is None:
            return None
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return EXHAUSTION[code].format(limit=limit)
