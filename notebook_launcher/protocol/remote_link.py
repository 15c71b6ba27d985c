"""The socket between the kernel and a rank on another machine (a Ray actor): one TCP connection
per rank, authenticated per launch, carrying what pipes carry on one machine.

The kernel listens; each rank connects and proves it holds the launch's secret before the kernel
sends it a single byte (a connection that cannot is closed having received nothing). The kernel
then proves it holds the secret too, so a rank never sends its output to an impostor. Each proof
is an HMAC-SHA256 over a fresh random nonce, the launch attempt and the rank; the kernel accepts
each (attempt, rank) once.

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
from multiprocessing.connection import Connection

EVENT = b"e"  # rank -> kernel: a pickled event
STDOUT = b"o"  # rank -> kernel: raw bytes the rank wrote to fd 1
STDERR = b"r"  # rank -> kernel: raw bytes the rank wrote to fd 2
SIGNAL = b"s"  # kernel -> rank: one byte, the signal number
COMMAND = b"c"  # kernel -> rank: a session command (protocol.session.Command bytes)
REPLY = b"p"  # kernel -> rank: the answer to the rank's prompt (a pickled InputReply)
BEAT = b"b"  # rank -> kernel: nothing but "this rank's process and node still answer"
BEAT_EVERY = 1.0  # seconds between a rank's heartbeats
# A WorkerFinished payload that starts with this holds a reference into Ray's object store (the
# value was too large for the socket), not the value's pickle.
STORED = b"\x00stored\x00"

SECRET_BYTES = 32
HANDSHAKE_TIMEOUT = 10.0  # seconds either side waits for the other's proof
_NONCE = 32
_DIGEST = hashlib.sha256().digest_size
_HELLO = struct.Struct("!II")  # attempt, rank


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


def accept_rank(
    sock: socket.socket, secret: bytes, timeout: float = HANDSHAKE_TIMEOUT
) -> tuple[int, int]:
    """The kernel's side of the handshake on a freshly accepted socket: the ``(attempt, rank)``
    the rank proved it is. Raises :class:`AuthenticationFailed` (nothing was sent) or OSError;
    the caller closes the socket then."""
    sock.settimeout(timeout)
    hello = _read_exactly(sock, _NONCE + _HELLO.size + _DIGEST)
    nonce, header, proof = hello[:_NONCE], hello[_NONCE:-_DIGEST], hello[-_DIGEST:]
    if not hmac.compare_digest(proof, _proof(secret, b"rank", nonce, header)):
        raise AuthenticationFailed("a connection without the launch's secret was refused")
    sock.sendall(_proof(secret, b"kernel", nonce, header))
    sock.settimeout(None)
    attempt, rank = _HELLO.unpack(header)
    return attempt, rank


def join_kernel(
    address: tuple[str, int],
    secret: bytes,
    attempt: int,
    rank: int,
    timeout: float = HANDSHAKE_TIMEOUT,
) -> socket.socket:
    """The rank's side: connect to the kernel at ``address`` and prove who it is; the kernel's
    proof is checked before anything else is sent."""
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
