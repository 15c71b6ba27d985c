"""Listening on exactly one address: a TCP socket bound to the host it is given, and a torch
TCPStore server on such a socket (torch's own would listen on every interface). Used by the
kernel's rendezvous store and by the rank of a cluster launch that hosts the job's store."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from datetime import timedelta
from typing import Any

STORE_TIMEOUT = timedelta(minutes=30)  # torch's own default for process-group setup
LISTEN_BACKLOG = 2048


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on exactly ``host:port`` (``port=0``: a free port on ``host``).

    torch's TCPStore server listens on every interface when it opens the socket itself; handing
    it this socket (``master_listen_fd``) keeps the rendezvous on the interface it was given.

    Raises:
        OSError: the address cannot be bound (taken, not an address of this machine ...).
    """
    error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    ):
        sock = socket.socket(family, kind, proto)
        try:
            # Lets a relaunch reuse a port whose old connections are in TIME_WAIT; Linux still
            # refuses the bind while any other socket listens on the port.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(errno.EADDRNOTAVAIL, f"no address found for {host!r}")


def serve_store(sock: socket.socket, host: str, timeout: timedelta = STORE_TIMEOUT) -> Any:
    """Start a TCPStore server on an already listening socket, which the store then owns."""
    import torch.distributed as dist

    bound_port = sock.getsockname()[1]
    fd = sock.detach()  # the store owns the socket from here and closes it when destroyed
    try:
        return dist.TCPStore(
            host,
            bound_port,
            is_master=True,
            wait_for_workers=False,
            timeout=timeout,
            master_listen_fd=fd,
        )
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
