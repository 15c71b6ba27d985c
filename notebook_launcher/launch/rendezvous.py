"""The rendezvous store, hosted by the kernel for the length of one attempt."""

from __future__ import annotations

from datetime import timedelta

STORE_TIMEOUT = timedelta(minutes=30)  # torch's own default for process-group setup


class KernelStore:
    """A TCPStore server owned by the kernel, as torchrun's agent owns one.

    Workers connect to it as clients (``TORCHELASTIC_USE_AGENT_STORE``), so no worker binds a
    port and no port can stay bound once the kernel closes the store. When the requested port
    is taken and the job is single-node, the operating system picks a free one instead: two
    kernels launching at once, or a port left bound by another program, cannot collide.
    """

    def __init__(self, host: str, port: int, exact: bool) -> None:
        import torch.distributed as dist

        try:
            self._store = dist.TCPStore(
                host, port, is_master=True, wait_for_workers=False, timeout=STORE_TIMEOUT
            )
        except (RuntimeError, OSError) as exc:
            if exact or "EADDRINUSE" not in str(exc) and "in use" not in str(exc):
                raise OSError(
                    f"use_port={port}: cannot listen on {host}:{port} for the rendezvous ({exc})"
                ) from exc
            self._store = dist.TCPStore(
                host, 0, is_master=True, wait_for_workers=False, timeout=STORE_TIMEOUT
            )
        self.port = self._store.port
        self.requested_port = port

    def close(self) -> None:
        """Stop listening. Idempotent."""
        self._store = None
