"""The nodes of a multi-node launch joining and leaving one rendezvous (see :mod:`.node_attempt`);
``rdzv_backend="static"``: node 0's kernel hosts the store."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..errors import LaunchError, NodesMissingError
from ..planning.plan import LaunchPlan
from .checks import format_endpoint
from .node_attempt import (
    CLOSED_KEY,
    LEAVE_GRACE,
    NAMESPACE,
    POLL_EVERY,
    STORE_ERRORS,
    WAIT_NOTICE_AFTER,
    NodeAttempt,
    ranks_text,
)
from .store import STORE_TIMEOUT, connect_store
from .store_process import StoreProcess

# The kernels only read keys that exist (their waits are loops of their own), so a store operation
# taking this long means the connection is broken, not that a key is late.
CLIENT_TIMEOUT = timedelta(seconds=60)


class StaticNodes:
    """The nodes of a ``rdzv_backend="static"`` launch: node 0's kernel hosts the store at
    ``master_addr:use_port`` (that address and port exactly), the others connect to it."""

    backend = "static"

    def __init__(self, plan: LaunchPlan, notice: Callable[[str], None]) -> None:
        self.plan = plan
        self.notice = notice
        self.root: Any = None
        self.hosting = False
        self._server: StoreProcess | None = None  # the store, where this kernel hosts it
        self._store: Any = None  # the current attempt's prefixed store
        self._attempt: NodeAttempt | None = None
        self._me: int | None = None  # this node's rank in the current attempt's store
        self.endpoint = format_endpoint(plan.master_addr, plan.requested_port)

    # -- joining ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def attempt(self, restart: int):
        """Join the other nodes for attempt ``restart``; on failure, tell them."""
        if self._attempt is not None:
            self._attempt.release()  # an earlier attempt's frames may outlive it in a cycle
            self._attempt = None
        try:
            attempt = self._join(restart)
        except BaseException as exc:
            # The frames of a failed join hold the store: cleared, so that a notebook keeping
            # the exception does not keep the rendezvous listening.
            traceback.clear_frames(exc.__traceback__)
            raise
        self._attempt = attempt
        try:
            yield attempt
        except BaseException as exc:
            replacement = attempt.failed(exc)
            if replacement is exc:
                raise
            raise replacement from None

    def _join(self, restart: int) -> NodeAttempt:
        plan = self.plan
        started = time.monotonic()
        until = started + plan.rdzv_timeout
        if self.root is None:
            self._open(until)
        from torch.distributed import PrefixStore

        self._store = PrefixStore(f"{NAMESPACE}/attempt_{restart}/", self.root)
        self._arrive(self._store, plan.node_rank)
        self._me = plan.node_rank
        self._await_nodes(self._store, plan.node_rank, started, until)
        self._fresh_worker_keys(self._store, restart, plan.node_rank, until)
        return NodeAttempt(
            plan, plan.requested_port, self._store, restart, self.endpoint, 0, self.notice
        )

    def _open(self, until: float) -> None:
        plan = self.plan
        if plan.node_rank == 0:
            address = f"{plan.master_addr}:{plan.requested_port}"
            try:
                self._server = StoreProcess(plan.master_addr, plan.requested_port, STORE_TIMEOUT)
            except OSError as exc:
                raise OSError(
                    f"use_port={plan.requested_port}: cannot listen on {address} for the "
                    f"rendezvous ({exc}). node_rank=0 hosts it at master_addr:use_port: "
                    "master_addr must be an address of this machine and the port free (is "
                    "another launch with node_rank=0 running?)"
                ) from None
            self.hosting = True
        self.root = self._connect(plan.master_addr, plan.requested_port, until, CLIENT_TIMEOUT)
        if self.root is None:
            raise self._unreachable()

    @staticmethod
    def _connect(host: str, port: int, until: float, timeout: timedelta) -> Any:
        """A client of the store at ``host:port``, or None if none answered before ``until``.

        The store of a launch that is ending (its host is closing it) is passed over.
        """
        while True:
            root = connect_store(host, port, until, timeout)
            if root is None or not root.check([CLOSED_KEY]):
                return root
            del root
            time.sleep(POLL_EVERY)

    def _unreachable(self) -> NodesMissingError:
        plan = self.plan
        ranks = tuple(plan.node_ranks(0))
        return NodesMissingError(
            f"could not reach the rendezvous at {self.endpoint} within {plan.rdzv_timeout:g} s "
            f"(rdzv_timeout): node 0 (global ranks {ranks_text(ranks)}) hosts it there and has "
            "not started its launch, or master_addr/use_port differ between the nodes, or a "
            f"firewall blocks port {plan.requested_port}. No process was started on this node.",
            (0,),
            ranks,
            self.endpoint,
            plan.rdzv_timeout,
        )

    def _about(self) -> str:
        return json.dumps(
            {
                "num_processes": self.plan.num_processes,
                "num_nodes": self.plan.num_nodes,
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
        )

    def _arrive(self, store: Any, node: int) -> None:
        about = self._about()
        taken = store.compare_set(f"node/{node}", "", about)
        if taken.decode() != about:
            other = json.loads(taken)
            raise LaunchError(
                f"node_rank={node} is already taken by the launch of pid {other['pid']} on "
                f"{other['host']}: give every node its own node_rank (0 to "
                f"{self.plan.num_nodes - 1})"
            )

    def _await_nodes(self, store: Any, me: int, started: float, until: float) -> None:
        told = False
        nodes = range(self.plan.num_nodes)
        while True:
            missing = [n for n in nodes if not store.check([f"node/{n}"])]
            if not missing:
                break
            now = time.monotonic()
            if now >= until:
                raise self._missing(missing, now - started)
            if not told and now - started >= WAIT_NOTICE_AFTER:
                told = True
                self.notice(
                    f"notebook_launcher: node {me} of {self.plan.num_nodes} is waiting for "
                    f"{self._missing_text(missing)} at {self.endpoint} (up to "
                    f"{self.plan.rdzv_timeout:g} s)"
                )
            time.sleep(min(POLL_EVERY, max(0.0, until - now)))
        for node in nodes:
            self._check_same(node, json.loads(store.get(f"node/{node}")))

    def _fresh_worker_keys(self, store: Any, restart: int, me: int, until: float) -> None:
        """Before a restart's workers start, forget what the last attempt's workers stored.

        torch's ``env://`` rendezvous no longer puts the attempt in its keys, so in a store that
        outlives an attempt the new workers would read their predecessors' addresses. Every node
        has torn its workers down once all have arrived here; node 0 then deletes the workers'
        keys and the others wait until it has.
        """
        if restart == 0:
            return
        if me == 0:
            clear_worker_keys(self.root)
            store.set("ready", "1")
            return
        while not store.check(["ready"]):
            if time.monotonic() >= until:
                raise LaunchError(
                    f"node 0 did not prepare the restart within {self.plan.rdzv_timeout:g} s "
                    "(rdzv_timeout)"
                )
            time.sleep(POLL_EVERY / 2)

    def _missing_text(self, missing: list[int]) -> str:
        ranks = [r for n in missing for r in self.plan.node_ranks(n)]
        return f"node {ranks_text(missing)} (global ranks {ranks_text(ranks)})"

    def _missing(self, missing: list[int], waited: float) -> NodesMissingError:
        plan = self.plan
        ranks = tuple(r for n in missing for r in plan.node_ranks(n))
        return NodesMissingError(
            f"gave up after {plan.rdzv_timeout:g} s (rdzv_timeout) waiting for "
            f"{self._missing_text(missing)} at the rendezvous {self.endpoint} "
            f"(rdzv_backend='static'). Start the launch there with num_nodes={plan.num_nodes}, "
            f"node_rank=<its rank>, master_addr={plan.master_addr!r}, "
            f"use_port={plan.requested_port}, or pass a larger rdzv_timeout.",
            tuple(missing),
            ranks,
            self.endpoint,
            waited,
        )

    def _check_same(self, node: int, about: dict) -> None:
        plan = self.plan
        for name, mine in (("num_processes", plan.num_processes), ("num_nodes", plan.num_nodes)):
            if about[name] != mine:
                raise ValueError(
                    f"{name}={mine} on this node but node {node} ({about['host']}, pid "
                    f"{about['pid']}) uses {name}={about[name]}: every node must use the same "
                    f"{name}"
                )

    # -- leaving ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Leave the rendezvous; the hosting kernel waits (briefly) for the others to leave.

        Every reference to the store is dropped here, so the hosting kernel stops listening
        even while the launch's exception (and its traceback) is kept by the notebook.
        """
        store, me = self._store, self._me
        if store is not None and me is not None:
            with contextlib.suppress(*STORE_ERRORS):
                store.set(f"left/{me}", "1")
        if self.hosting and store is not None:
            with contextlib.suppress(*STORE_ERRORS):
                self.root.set(CLOSED_KEY, "1")
                self._await_leavers(store)
        if self._attempt is not None:
            self._attempt.release()
        del store
        self._store = self._attempt = self.root = self._me = None
        if self._server is not None:
            self._server.close()
            self._server = None

    def _await_leavers(self, store: Any) -> None:
        gone = self._attempt.gone if self._attempt is not None else set()
        others = [n for n in range(self.plan.num_nodes) if n != self._me and n not in gone]
        arrived = [n for n in others if store.check([f"node/{n}"])]
        end = time.monotonic() + LEAVE_GRACE
        while time.monotonic() < end:
            if all(store.check([f"left/{n}"]) for n in arrived):
                return
            time.sleep(POLL_EVERY / 2)


def clear_worker_keys(store: Any) -> None:
    """Delete every key of ``store`` but the launcher's and torch's rendezvous' own."""
    try:
        keys = store.list_keys()
    except (AttributeError, RuntimeError):
        return  # torch without list_keys still prefixes worker keys with the restart count
    for key in keys:
        if not key.startswith((f"{NAMESPACE}/", "torch.rendezvous.")):
            store.delete_key(key)
