"""The store of a multi-node launch, served by a process of its own instead of the kernel.

A TCPStore server runs a thread that resolves the address of every client that connects. A
kernel that hosts one and forks its workers while other nodes' workers connect can fork at the
moment that thread holds glibc's resolver lock, and the child then blocks forever on the lock it
inherited (the single-node store avoids this by serving only once every worker is forked, which a
store other machines join first cannot do). Here the kernel forks one small process before any
server thread exists; that process serves the store on the socket the kernel bound, and the
kernel, like every other node, is a client of it. Stopping the process frees the port at once,
whatever still refers to the store, and it dies with the kernel.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
from datetime import timedelta
from typing import Any

from ...utils.parent_death import die_with_parent
from .store import bind_listener

START_TIMEOUT = 60.0  # seconds the server process may take to answer


def _serve(
    sock: socket.socket, host: str, timeout: float, parent: int, ready: Any, stop: Any
) -> None:
    """Body of the server process: serve ``sock`` until the kernel closes ``stop`` or dies."""
    die_with_parent(parent)  # own process group (no kernel interrupt), SIGKILL with the kernel
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):  # torch's warnings about clients that went away belong to no cell
        os.dup2(devnull, fd)
    import torch.distributed as dist

    port = sock.getsockname()[1]
    store = dist.TCPStore(
        host,
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout),
        master_listen_fd=sock.detach(),
    )
    ready.send(port)
    with contextlib.suppress(EOFError, OSError):
        stop.recv()  # returns (EOFError) once the kernel closes its end
    del store
    os._exit(0)


class StoreProcess:
    """A TCPStore server listening on exactly ``host:port``, in a forked process.

    Raises:
        OSError: the address cannot be bound, or the server did not start.
    """

    def __init__(self, host: str, port: int, timeout: timedelta) -> None:
        sock = bind_listener(host, port)
        context = multiprocessing.get_context("fork")
        ready_r, ready_w = context.Pipe(duplex=False)
        stop_r, stop_w = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_serve,
            args=(sock, host, timeout.total_seconds(), os.getpid(), ready_w, stop_r),
            name="notebook_launcher-store",
            daemon=True,
        )
        try:
            self._process.start()
        finally:
            for end in (sock, ready_w, stop_r):
                end.close()
        self._stop = stop_w
        try:
            if not ready_r.poll(START_TIMEOUT):
                raise EOFError
            self.port = ready_r.recv()
        except (EOFError, OSError):
            self.close()
            raise OSError(
                f"the rendezvous store at {host}:{port} did not start (its process ended with "
                f"exit code {self._process.exitcode})"
            ) from None
        finally:
            ready_r.close()

    def close(self) -> None:
        """Stop the server; its port is free when this returns. Idempotent."""
        if self._stop is not None:
            self._stop.close()
            self._stop = None
        self._process.join(2.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(2.0)
