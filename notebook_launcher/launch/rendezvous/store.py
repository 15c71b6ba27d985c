"""The rendezvous store: a torch TCPStore bound to exactly the address it is given, hosted by the
kernel (as torchrun's agent hosts one) or reached as a client."""

from __future__ import annotations

import errno
import logging
import socket
import time
from datetime import timedelta
from typing import Any

from ...utils.listening import STORE_TIMEOUT, bind_listener, serve_store

logger = logging.getLogger(__name__)
CONNECT_PROBE_EVERY = 0.2  # seconds between attempts to reach a store that is not up yet


def is_address_in_use(exc: OSError) -> bool:
    return exc.errno == errno.EADDRINUSE or "in use" in str(exc)


def connect_store(host: str, port: int, deadline: float, timeout: timedelta = STORE_TIMEOUT) -> Any:
    """Connect to the TCPStore at ``host:port`` as a client, waiting for it until ``deadline``.

    The address is probed with a plain socket first, so waiting for a store that is not up yet
    prints nothing and a kernel interrupt is handled between probes.

    Returns:
        The client store, or None if nothing accepted a connection before ``deadline``
        (``time.monotonic()`` seconds).
    """
    import torch.distributed as dist

    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(1.0, left))):
                pass
            break
        except OSError:
            if left <= 0:
                return None
            time.sleep(min(CONNECT_PROBE_EVERY, max(0.0, deadline - time.monotonic())))
    return dist.TCPStore(host, port, is_master=False, timeout=timeout)


class KernelStore:
    """A TCPStore server owned by the kernel, as torchrun's agent owns one.

    Workers connect to it as clients (``TORCHELASTIC_USE_AGENT_STORE``), so no worker binds a
    port and no port can stay bound once the kernel closes the store. The server listens on
    ``host`` only (a single-node launch: 127.0.0.1). When the requested port is taken and the
    job is single-node, the operating system picks a free one instead: two kernels launching at
    once, or a port left bound by another program, cannot collide.
    """

    def __init__(self, host: str, port: int, exact: bool, serve: bool = True) -> None:
        try:
            self._listener: socket.socket | None = bind_listener(host, port)
        except OSError as exc:
            if exact or not is_address_in_use(exc):
                raise OSError(
                    f"use_port={port}: cannot listen on {host}:{port} for the rendezvous ({exc})"
                ) from exc
            self._listener = bind_listener(host, 0)
            logger.info(
                "port %d on %s is taken; the rendezvous listens on free port %d instead",
                port,
                host,
                self._listener.getsockname()[1],
            )
        self.host = host
        self.port = self._listener.getsockname()[1]
        self.requested_port = port
        self._store: Any = None
        if serve:
            self.serve()

    def serve(self) -> None:
        """Start answering on the bound port. Idempotent.

        A single-node launch calls this only once every worker is forked: the store's server
        thread resolves each client's address, and a fork taken while that thread holds the C
        library's resolver lock leaves the child blocked forever on the inherited lock. Clients
        that connect earlier wait in the socket's backlog.
        """
        if self._store is None and self._listener is not None:
            listener, self._listener = self._listener, None
            self._store = serve_store(listener, self.host)

    @property
    def store(self) -> Any:
        """The server's own store object (None before :meth:`serve` and once closed)."""
        return self._store

    def close(self) -> None:
        """Stop listening. Idempotent."""
        self._store = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
