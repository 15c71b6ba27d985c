"""The watch over an attempt's ranks on a Ray cluster, and how a rank's end is worded: its
actor's run returned or failed, its actor died or could not start, its node went silent or left
the cluster."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..remote.links import close_writers
from .handle import RayHandle
from .joining import Placement, first_lines

WATCH_EVERY = 0.1  # seconds between the watcher's looks at the ranks' runs
KERNEL_HELD = 1.0  # seconds between the watcher's looks that mean this kernel was held up
NODE_LOST = "its node has died"  # in Ray's message when an actor's node left the cluster


class RankWatch:
    """A thread that ends each rank's process as its actor's run ends (or its node goes silent
    for ``node_timeout`` seconds), saying why; ``killed`` holds the ranks the kernel killed
    itself (their end needs no words)."""

    def __init__(
        self,
        ray: Any,
        handles: list[RayHandle],
        placement: Placement,
        node_timeout: float,
        killed: set[int],
    ) -> None:
        self.ray = ray
        self.handles = handles
        self.placement = placement
        self.node_timeout = node_timeout
        self.killed = killed
        self._stopped = threading.Event()
        self._last_tick = 0.0
        self._thread = threading.Thread(
            target=self._watch, name="notebook_launcher-ray-watch", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the thread ends at its next look)."""
        self._stopped.set()

    def join(self, wait: float) -> None:
        """Wait up to ``wait`` seconds for the thread to end (unless it asks itself)."""
        if self._thread is not threading.current_thread():
            self._thread.join(wait)

    def _watch(self) -> None:
        ray = self.ray
        self._last_tick = time.monotonic()
        while not self._stopped.is_set():
            for handle in self.handles:
                handle.process.overdue()
            self._check_silence()
            pending = {h.run: h for h in self.handles if h.run is not None and not h.process.known}
            if not pending:
                if all(not h.process.is_alive() for h in self.handles):
                    return
                time.sleep(WATCH_EVERY)
                continue
            try:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WATCH_EVERY)
            except Exception:  # the driver is shutting down
                return
            for ref in ready:
                self._ended(pending[ref], ref)

    def _check_silence(self) -> None:
        """End the ranks of a node from which nothing (not even a heartbeat) came for
        ``node_timeout`` seconds: it is frozen, cut off, or gone without closing its sockets."""
        now = time.monotonic()
        gap, self._last_tick = now - self._last_tick, now
        if gap > KERNEL_HELD:  # this kernel itself could not listen meanwhile: not the node's
            for handle in self.handles:
                handle.heard += gap
        limit = self.node_timeout
        listening: dict[str, list[RayHandle]] = {}
        for handle in self.handles:
            if handle.link is not None and not handle.process.known:
                listening.setdefault(self.placement.node_ids[handle.rank], []).append(handle)
        for node_id, handles in listening.items():
            if all(now - handle.heard >= limit for handle in handles):
                death = self._silent(node_id, limit)
                for handle in handles:
                    handle.process.silent = True
                    handle.process.ended(-9, death)

    def _silent(self, node_id: str, limit: float) -> str:
        """Why the ranks of ``node_id`` were ended when none sent anything for ``limit`` s: a
        rank alone on its node may be frozen itself, or its node may be; several ranks of one
        node all silent mean the node. Says whether Ray still sees the node."""
        ranks = self.placement.ranks_on(node_id)
        where = (
            f"{self.handles[ranks[0]].node.split(',')[0]} (address "
            f"{self.placement.addresses.get(node_id, '?')}, Ray node {node_id})"
        )
        alive = next((n.get("Alive") for n in nodes(self.ray) if n.get("NodeID") == node_id), None)
        ray_view = {True: "Ray still sees it as alive", False: "Ray shows it as dead"}.get(
            alive, "Ray no longer lists it"
        )
        after = (
            "the other ranks were stopped (RayCluster(node_timeout=...) sets how long a rank may "
            "be silent)"
        )
        if len(ranks) == 1:
            return (
                f"rank {ranks[0]} stopped answering: it sent nothing for {limit:g} s, not even "
                "the heartbeat it sends every second from a thread of its own (its process "
                "frozen or stuck outside Python, or its node frozen or cut off from this "
                f"kernel); it was alone on {where}: {ray_view}; {after}"
            )
        return (
            f"its node stopped answering: {where} sent nothing for {limit:g} s, not even the "
            "heartbeat each rank sends every second (frozen, cut off from this kernel, or gone "
            f"without closing its connections), with rank {', '.join(map(str, ranks))} on it, "
            f"all silent: {ray_view}; {after}"
        )

    def _ended(self, handle: RayHandle, ref: Any) -> None:
        ray = self.ray
        try:
            code, death = int(ray.get(ref)), None
        except ray.exceptions.RayActorError as error:
            code, death = -9, self._death(handle, error)
        except Exception as error:  # the run itself failed in the actor
            code, death = 1, f"its Ray task failed: {first_lines(error)}"
        if handle.link is None:
            close_writers(handle)
        handle.process.ended(code, death)

    def _death(self, handle: RayHandle, error: BaseException) -> str | None:
        """Why a rank's actor died, as a report says it (None: the kernel killed it)."""
        if handle.rank in self.killed:
            return None
        text = str(error)
        lost = lost_node(self.ray, self.placement, handle, text)
        if lost is not None:
            return lost
        if "No module named" in text or getattr(error, "actor_init_failed", False):
            return (
                f"its Ray actor could not start: {first_lines(error)}. notebook_launcher and "
                "what the function imports must be installed on every node (or shipped with "
                "RayCluster(runtime_env={'py_modules': [...]} or {'pip': [...]}))"
            )
        return f"its Ray actor died: {first_lines(error)}"


def lost_node(ray: Any, placement: Placement, handle: RayHandle, text: str = "") -> str | None:
    """Why the rank ended if its node left the cluster (Ray's error ``text`` says so, or the
    cluster shows the node dead); None while the node is alive."""
    node_id = placement.node_ids[handle.rank]
    node = next((n for n in nodes(ray) if n.get("NodeID") == node_id), {})
    if NODE_LOST not in text and node.get("Alive") is not False:
        return None
    ranks = placement.ranks_on(node_id)
    address = placement.addresses.get(node_id, "?")
    why = node.get("DeathReasonMessage") or _after(text, NODE_LOST)
    return (
        f"its node was lost: {handle.node.split(',')[0]} (address {address}, Ray node "
        f"{node_id}) left the cluster{f' ({why})' if why else ''}, with rank "
        f"{', '.join(map(str, ranks))} on it; the other ranks were stopped"
    )


def nodes(ray: Any) -> list[dict]:
    """The cluster's nodes as Ray lists them (none if it cannot say)."""
    try:
        return ray.nodes()
    except Exception:
        return []


def _after(text: str, marker: str) -> str:
    rest = text.split(marker, 1)[-1] if marker in text else ""
    lines = [line.strip(" .\t") for line in rest.splitlines() if line.strip(" .\t")]
    return "; ".join(line for line in lines[1:] if not line.startswith("Node Id"))[:300]
