"""``rdzv_backend="c10d"``: the nodes meet through torch's own dynamic rendezvous.

The rendezvous protocol is torch's (``DynamicRendezvousHandler`` over a ``C10dRendezvousBackend``,
as torchrun uses it, with ``rdzv_conf`` as its settings); it assigns the node ranks. Only the
store under it is opened here, so that it listens on exactly ``rdzv_endpoint``: the kernel whose
machine owns that address hosts it (or the one ``rdzv_conf={"is_host": True}`` names), the other
kernels connect to it, and the workers of every node use it as their ``env://`` store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..errors import LaunchError, NodesMissingError
from ..planning.plan import LaunchPlan
from .checks import parse_endpoint
from .node_attempt import NAMESPACE, NodeAttempt, ranks_text
from .static import StaticNodes
from .store import is_address_in_use
from .store_process import StoreProcess

DEFAULT_READ_TIMEOUT = 60  # seconds; torch's default for the c10d store
# rdzv_conf keys that set up the store rather than torch's handler
_OUR_KEYS = ("is_host", "store_type", "read_timeout")
_env_lock = threading.Lock()


@contextlib.contextmanager
def _store_not_shared():
    """Keep torch's handler from opening a second store for the workers.

    Since torch 2.4 the rendezvous' rank-0 node starts one more TCPStore server for the workers,
    listening on every interface at a free port. The workers here use the rendezvous store
    itself, so that server is switched off with torch's own opt-out while the handler runs.
    """
    name = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
    with _env_lock:
        previous = os.environ.get(name)
        os.environ[name] = "1"
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous


class C10dNodes(StaticNodes):
    """The nodes of a ``rdzv_backend="c10d"`` launch."""

    backend = "c10d"

    def __init__(self, plan: LaunchPlan, notice: Callable[[str], None]) -> None:
        super().__init__(plan, notice)
        self.endpoint = plan.rdzv_endpoint
        self.host, self.port = parse_endpoint(plan.rdzv_endpoint, plan.master_addr, 0)
        self.conf = dict(plan.rdzv_conf)
        self.handler: Any = None

    def _open(self, until: float) -> None:
        read_timeout = timedelta(seconds=self.conf.get("read_timeout", DEFAULT_READ_TIMEOUT))
        is_host = self.conf.get("is_host")
        if is_host is not False:
            try:
                self._server = StoreProcess(self.host, self.port, read_timeout)
                self.hosting = True
            except OSError as exc:
                # Not an address of this machine, or another kernel here hosts it already.
                if is_host is True or not (is_address_in_use(exc) or _not_local(exc)):
                    raise OSError(
                        f"rdzv_endpoint={self.endpoint!r}: cannot listen on {self.endpoint} for "
                        f"the rendezvous ({exc})"
                    ) from exc
        self.root = self._connect(self.host, self.port, until, read_timeout)
        if self.root is None:
            raise self._nobody(0, self.plan.rdzv_timeout)
        self.handler = _torch_call("creating the c10d rendezvous handler failed", self._handler)

    def _handler(self) -> Any:
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
            C10dRendezvousBackend,
        )
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

        settings = {k: v for k, v in self.conf.items() if k not in _OUR_KEYS}
        settings = {k: math.ceil(v) if isinstance(v, float) else v for k, v in settings.items()}
        settings["join_timeout"] = math.ceil(self.plan.rdzv_timeout)
        params = RendezvousParameters(
            backend="c10d",
            endpoint=self.endpoint,
            run_id=self.plan.rdzv_id,
            min_nodes=self.plan.num_nodes,
            max_nodes=self.plan.num_nodes,
            local_addr=socket.gethostname(),
            **settings,
        )
        backend = C10dRendezvousBackend(self.root, self.plan.rdzv_id)
        return create_handler(self.root, backend, params)

    def _join(self, restart: int) -> NodeAttempt:
        from torch.distributed import PrefixStore
        from torch.distributed.elastic.rendezvous.api import (
            RendezvousClosedError,
            RendezvousTimeoutError,
        )

        started = time.monotonic()
        until = started + self.plan.rdzv_timeout
        if self.root is None:
            self._open(until)
        counter = f"{NAMESPACE}/{self.plan.rdzv_id}/arrivals/{restart}"
        self.root.add(counter, 1)
        error: BaseException | None = None
        try:
            with _store_not_shared():
                info = self.handler.next_rendezvous()
            node, round_store = info.rank, info.store
            del info
        except RendezvousTimeoutError:
            error = self._nobody(self.root.add(counter, 0), time.monotonic() - started)
        except RendezvousClosedError:
            error = LaunchError(
                f"the c10d rendezvous rdzv_id={self.plan.rdzv_id!r} at {self.endpoint} is closed "
                "(a launch with this rdzv_id already ended there): pass a new rdzv_id to every "
                "node"
            )
        except Exception as exc:
            error = LaunchError(f"the c10d rendezvous failed: {type(exc).__name__}: {exc}")
        if error is not None:
            # Raised here, not in the handler, so that no traceback keeps torch's frames (and
            # the store they hold) alive.
            raise error
        plan = dataclasses.replace(self.plan, node_rank=node, master_addr=self.host)
        self.plan = plan
        self._store = PrefixStore(f"{NAMESPACE}/", round_store)  # a fresh prefix every round
        del round_store
        if self.hosting:
            self._store.set("host", str(node))
        self._arrive(self._store, node)
        self._me = node
        self._await_nodes(self._store, node, started, until)
        self._fresh_worker_keys(self._store, restart, node, until)
        host_node = int(self._store.get("host")) if self._store.check(["host"]) else None
        return NodeAttempt(
            plan, self.port, self._store, restart, self.endpoint, host_node, self.notice
        )

    def _nobody(self, arrived: int, waited: float) -> NodesMissingError:
        plan = self.plan
        total = plan.num_nodes * plan.num_processes
        missing = tuple(range(arrived * plan.num_processes, total))
        where = (
            f"only {arrived} of {plan.num_nodes} nodes joined"
            if arrived
            else "could not reach or host"
        )
        return NodesMissingError(
            f"gave up after {plan.rdzv_timeout:g} s (rdzv_timeout or join_timeout): {where} the "
            f"c10d rendezvous rdzv_id={plan.rdzv_id!r} at {self.endpoint}; global ranks "
            f"{ranks_text(missing)} have no node. Start the "
            f"launch on the other nodes with num_nodes={plan.num_nodes}, rdzv_backend='c10d', "
            f"rdzv_endpoint={self.endpoint!r}, rdzv_id={plan.rdzv_id!r}, or pass a larger "
            "rdzv_timeout.",
            (),
            missing,
            self.endpoint,
            waited,
        )

    def close(self) -> None:
        """Shut torch's handler down (its heartbeats stop), then leave as a static node does."""
        if self.handler is not None:
            with contextlib.suppress(Exception):
                self.handler.shutdown()
            self.handler = None
        super().close()


def _torch_call(what: str, call: Any) -> Any:
    """``call()``, its failure raised as a LaunchError that holds no frame of torch's."""
    error: LaunchError | None = None
    try:
        return call()
    except Exception as exc:
        error = LaunchError(f"{what}: {type(exc).__name__}: {exc}")
    raise error


def _not_local(exc: OSError) -> bool:
    return exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
