"""The socket between the kernel and a rank on another machine (a Ray actor): one TCP connection
per rank, authenticated per launch, carrying what pipes carry on one machine.

The kernel listens; each rank connects and proves it holds the launch's secret before the kernel
sends it a single byte (a connection that cannot is closed having received nothing). The kernel
then proves it holds the secret too, so a rank never sends its output to an impostor. Each proof
is an HMAC-SHA256 over a fresh random nonce, the launch attempt and the rank; the kernel accepts
each (attempt, rank) once. A rank sends its whole proof at once; a connection that has not within
:data:`HANDSHAKE_DEADLINE` seconds of being accepted is closed.

After the handshake both sides exchange framed messages (``multiprocessing.connection``'s
framing), each one tag byte and a body:

* rank -> kernel: an event (pickled, as on the event pipe), or a chunk of the rank's raw stdout
  or stderr bytes (file-descriptor level, as on the output pipes);
* kernel -> rank: a signal to deliver to the rank's main thread (stop, stack dump, interrupt),
  or a session command.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import time
from multiprocessing.connection import Connection

EVENT = b"e"  # rank -> kernel: a pickled event
STDOUT = b"o"  # rank -> kernel: raw bytes the rank wrote to fd 1
STDERR = b"r"  # rank -> kernel: raw bytes the rank wrote to fd 2
SIGNAL = b"s"  # kernel -> rank: one byte, the signal number
COMMAND = b"c"  # kernel -> rank: a session command (protocol.session.Command bytes)
REPLY = b"p"  # kernel -> rank: the answer to the rank's prompt (a pickled InputReply)
BEAT = b"b"  # rank -> kernel: nothing but "this rank's process and node still answer"
NODE = b"n"  # rank -> kernel, first: its node's environment (JSON), before it loads the function
GO = b"g"  # kernel -> rank: its node can run the launch: load the function
BEAT_EVERY = 1.0  # seconds between a rank's heartbeats
# A WorkerFinished payload that starts with this holds a reference into Ray's object store (the
# value was too large for the socket), not the value's pickle.
STORED = b"\x00stored\x00"

SECRET_BYTES = 32
HANDSHAKE_TIMEOUT = 10.0  # seconds a rank waits for the kernel's proof
# Seconds a connection has, from the moment the kernel accepted it, to prove it holds the
# secret (all of it: a client that trickles a byte at a time is cut off all the same).
HANDSHAKE_DEADLINE = 5.0
# Seconds a rank keeps trying to reach the kernel (refused, reset or unanswered connections: a
# listener busy with a flood of other connections), each try bounded by HANDSHAKE_TIMEOUT.
JOIN_WITHIN = 60.0
JOIN_RETRY = 0.2  # seconds between a rank's tries
_NONCE = 32
_DIGEST = hashlib.sha256().digest_size
_HELLO = struct.Struct("!II")  # attempt, rank
HELLO_SIZE = _NONCE + _HELLO.size + _DIGEST  # what a rank sends first, all of its handshake


class AuthenticationFailed(ConnectionError):
    """The other end did not prove it holds the launch's secret."""


def new_secret() -> bytes:
    """A fresh secret for one launch."""
    return secrets.token_bytes(SECRET_BYTES)


def _proof(secret: bytes, role: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, role + b"".join(parts), hashlib.sha256).digest()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AuthenticationFailed("the connection closed during the handshake")
        data += chunk
    return data


def check_hello(hello: bytes, secret: bytes) -> tuple[int, int, bytes]:
    """A rank's first :data:`HELLO_SIZE` bytes checked: ``(attempt, rank, answer)``, where
    ``answer`` is the kernel's proof to send back. Raises :class:`AuthenticationFailed` if the
    sender does not hold ``secret``."""
    if len(hello) != HELLO_SIZE:
        raise AuthenticationFailed("the handshake had the wrong length")
    nonce, header, proof = hello[:_NONCE], hello[_NONCE:-_DIGEST], hello[-_DIGEST:]
    if not hmac.compare_digest(proof, _proof(secret, b"rank", nonce, header)):
        raise AuthenticationFailed("a connection without the launch's secret was refused")
    attempt, rank = _HELLO.unpack(header)
    return attempt, rank, _proof(secret, b"kernel", nonce, header)


def accept_rank(
    sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_DEADLINE
) -> tuple[int, int]:
    """The kernel's side of the handshake on a freshly accepted (blocking) socket, within
    ``timeout`` seconds in all: the ``(attempt, rank)`` the rank proved it is. Raises
    :class:`AuthenticationFailed` (nothing was sent), TimeoutError or OSError; the caller
    closes the socket then."""
    deadline = time.monotonic() + timeout
    hello = b""
    while len(hello) < HELLO_SIZE:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete handshake within {timeout:g} s")
        sock.settimeout(left)
        chunk = sock.recv(HELLO_SIZE - len(hello))
        if not chunk:
            raise AuthenticationFailed("the connection closed during the handshake")
        hello += chunk
    attempt, rank, answer = check_hello(hello, secret)
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    sock.sendall(answer)
    sock.settimeout(None)
    return attempt, rank


def join_kernel(
    address: tuple[str, int],
    secret: bytes,
    attempt: int,
    rank: int,
    timeout: float = HANDSHAKE_TIMEOUT,
    within: float = JOIN_WITHIN,
) -> socket.socket:
    """The rank's side: connect to the kernel at ``address`` and prove who it is; the kernel's
    proof is checked before anything else is sent. A connection refused, reset or unanswered
    (each try bounded by ``timeout``) is tried again until ``within`` seconds passed; a kernel
    that answers without the secret is not."""
    deadline = time.monotonic() + within
    while True:
        try:
            return _join_once(address, secret, attempt, rank, timeout)
        except AuthenticationFailed as error:
            if "closed during" not in str(error) or time.monotonic() >= deadline:
                raise
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"could not reach the kernel at {address[0]}:{address[1]} within {within:g} s "
                    f"({error.strerror or type(error).__name__}): its listener refused, reset or "
                    "did not answer every try (too many other connections to it, a firewall, or "
                    "the kernel is gone)"
                ) from error
        time.sleep(JOIN_RETRY)


def _join_once(
    address: tuple[str, int], secret: bytes, attempt: int, rank: int, timeout: float
) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    try:
        nonce = secrets.token_bytes(_NONCE)
        header = _HELLO.pack(attempt, rank)
        sock.sendall(nonce + header + _proof(secret, b"rank", nonce, header))
        answer = _read_exactly(sock, _DIGEST)
        if not hmac.compare_digest(answer, _proof(secret, b"kernel", nonce, header)):
            raise AuthenticationFailed("the kernel's answer did not prove it holds the secret")
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def framed(sock: socket.socket) -> Connection:
    """A duplex message connection over ``sock`` (which it then owns)."""
    return Connection(sock.detach())
