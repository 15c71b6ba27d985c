"""Ray: each rank in a Ray actor of its own, anywhere on a Ray cluster, supervised from the kernel.

The kernel is the cluster's driver. Each attempt reserves one placement group for all its ranks
(all start or none), starts one actor per rank in it (owned by the kernel, so they die with it),
lets rank 0's actor host the job's rendezvous store, and gives every rank the torchrun
environment. Events and output come back over one authenticated socket per rank
(:mod:`.links`), which the ranks' handles turn into what a local worker's pipes carry: the worker
group, supervisor, watchdogs and views are the same as for fork and spawn.

Ray does what it is good at: scheduling, GPU assignment, shipping packages (``runtime_env``),
noticing a lost node, and moving large return values (through its object store).

Ray is imported only once a launch starts (:meth:`RayLauncher.prepare`).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any

from ....protocol import remote_link
from ....protocol.names import RAY_RANK_ACTOR, entry_point
from ....protocol.node_environment import describe_node, modules_imported
from ....protocol.spec import WorkerSpec
from ...errors import ClusterError
from ...planning.plan import LaunchPlan
from ..base import WorkerHandle
from ..remote.launcher import RemoteAttempt, RemoteLauncher, on_its_node
from ..remote.links import Commands, Relay, RemoteHandle, close_writers, new_handle
from .joining import PLACEMENT_POLL, Placement, first_lines, join, reserve, uploaded
from .node_check import problems_by_node, report

logger = logging.getLogger(__name__)
WATCH_EVERY = 0.1  # seconds between the watcher's looks at the ranks' runs
KERNEL_HELD = 1.0  # seconds between the watcher's looks that mean this kernel was held up
CHECK_WAIT = 5.0  # seconds the last answers get once every rank connected
NODE_LOST = "its node has died"  # in Ray's message when an actor's node left the cluster

__all__ = ["ClusterError", "RayLauncher"]


class RayLauncher(RemoteLauncher):
    """Starts each rank as a Ray actor on the cluster ``plan.cluster`` describes."""

    start_method = "ray"
    pickle_advice = (
        "On a Ray cluster the function and every argument travel to the ranks' actors by value "
        "(cloudpickle): pass something picklable (a path, a config, plain tensors) and create the "
        "object inside the function. Modules they import must be installed on every node, or "
        "shipped with RayCluster(runtime_env={'py_modules': [...]})."
    )

    def __init__(self, plan: LaunchPlan | None = None) -> None:
        super().__init__(plan)
        self.ray: Any = None
        self._actor_class: Any = None

    def prepare(self) -> None:
        self.ray = join(self.plan.cluster)

    def start_group(self, specs: list[WorkerSpec], payload: Any, now: float) -> list[WorkerHandle]:
        if self.ray is None:
            self.prepare()
        if self._actor_class is None:
            self._actor_class = self.ray.remote(entry_point(RAY_RANK_ACTOR))
        attempt = ClusterAttempt(self.ray, self.plan.cluster, self._actor_class)
        return attempt.start(specs, payload)


class ClusterAttempt(RemoteAttempt):
    """The actors, placement group, listener and threads of one attempt; released (nothing of it
    left on the cluster) once every handle is closed, or at once if it cannot start."""

    def __init__(self, ray: Any, settings: Any, actor_class: Any) -> None:
        self.ray = ray
        self.settings = settings
        self.actor_class = actor_class
        super().__init__()
        self.handles: list[RemoteHandle] = []
        self.placement: Placement | None = None
        self.relay: Relay | None = None
        self._killed: set[int] = set()
        self._watcher: threading.Thread | None = None
        self._last_tick = 0.0
        self._checks: dict[Any, int] = {}  # each actor's environment check -> its rank
        self._answers: dict[int, Any] = {}
        self._modules: tuple[str, ...] = ()
        self._runtime_env: dict | None = None

    # -- starting ---------------------------------------------------------------------------

    def _start_ranks(self, specs: list[WorkerSpec], payload: Any) -> None:
        ray = self.ray
        self._runtime_env = uploaded(ray, self.settings.runtime_env)
        placement = self.placement = reserve(ray, self.settings, len(specs))
        self.handles = [
            new_handle(
                rank,
                placement.local_ranks[rank],
                placement.node_ranks[rank],
                placement.node_label(rank),
                self,
            )
            for rank in range(len(specs))
        ]
        secret = remote_link.new_secret()
        restart = specs[0].context.restart_count
        self.relay = Relay(ray.util.get_node_ip_address(), secret, restart, self.handles)
        shipped = ray.put(payload)
        niceness = os.getpriority(os.PRIO_PROCESS, 0)  # the ranks run at the kernel's
        self._modules = modules_imported(payload) if isinstance(payload, bytes) else ()
        for handle in self.handles:
            options = self._options(handle.rank)
            handle.actor = self.actor_class.options(**options).remote(niceness)
            self._checks[handle.actor.check.remote(self._modules)] = handle.rank
            if specs[0].session:  # commands travel over the rank's socket
                handle.commands = Commands(handle)
        store = self.handles[0].actor.host_store.remote()
        for handle, spec in zip(self.handles, specs, strict=True):
            handle.run = handle.actor.run.remote(
                self._spec(spec, handle.rank),
                shipped,
                self.relay.address,
                secret,
                store,
                placement.row_label(handle.rank),
            )
        self._watcher = threading.Thread(
            target=self._watch, name="notebook_launcher-ray-watch", daemon=True
        )
        self._watcher.start()

    def _options(self, rank: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        resources = self.settings.resources
        options: dict[str, Any] = {
            "num_cpus": resources.pop("CPU", 0),
            "num_gpus": resources.pop("GPU", 0),
            "max_restarts": 0,
            "max_task_retries": 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.placement.group,
                placement_group_bundle_index=self.placement.bundles[rank],
            ),
        }
        if "memory" in resources:
            options["memory"] = resources.pop("memory")
        if resources:
            options["resources"] = resources
        if self._runtime_env is not None:
            options["runtime_env"] = dict(self._runtime_env)
        return options

    def _spec(self, spec: WorkerSpec, rank: int) -> WorkerSpec:
        """``spec`` as the rank's node sees it: its place among the node's ranks, and results
        that travel over its socket or the object store (not this machine's shared memory)."""
        placement = self.placement
        return on_its_node(
            spec,
            placement.local_ranks[rank],
            placement.local_world_size(rank),
            placement.node_ranks[rank],
            placement.num_nodes,
        )

    def _await_ranks(self) -> None:
        """Wait until every rank connected, or a rank's run ended before it could (its actor
        could not start: raised as a :class:`ClusterError`), within the settings' timeout."""
        deadline = time.monotonic() + self.settings.timeout
        while not self.relay.wait_joined(0.05):
            self._check_nodes(deadline)
            ended = [h for h in self.handles if h.process.known and h.link is None]
            if ended:
                self._check_nodes(deadline)  # an actor that could not start: say what it lacks
                handle = ended[0]
                raise ClusterError(
                    f"rank {handle.rank}'s actor could not start on {handle.node}: "
                    f"{handle.process.death or 'its run ended before it connected'}"
                )
            if any(h.process.known for h in self.handles):
                return  # a rank that joined already ended: the supervisor reports it
            if time.monotonic() >= deadline:
                raise self._not_connected()
        # Each actor answered before its rank connected: the answers are in, or about to be.
        self._check_nodes(max(deadline, time.monotonic() + CHECK_WAIT), every=True)

    def _not_connected(self) -> ClusterError:
        """What keeps the ranks that did not connect within the timeout: their actors still
        starting (they have not answered the environment check), or the way back to the kernel."""
        missing = [h.rank for h in self.handles if h.link is None]
        starting = [rank for rank in missing if rank not in self._answers]
        waited = f"within {self.settings.timeout:g} s"
        if starting:
            return ClusterError(
                f"the actors of rank {', '.join(map(str, starting))} did not start {waited}: "
                "Ray has not started their worker processes yet (it starts them at niceness "
                "15, so other busy processes on a node slow them down); RayCluster(timeout=...) "
                "waits longer"
            )
        host, port = self.relay.address
        gate = self.relay.gate
        if gate.trouble is not None:
            return ClusterError(
                f"rank {', '.join(map(str, missing))} did not connect to this kernel {waited}: "
                f"{gate.trouble}. Raise the limit (`ulimit -n` before starting Jupyter, or "
                "resource.setrlimit(resource.RLIMIT_NOFILE, ...) in the kernel) or close what "
                f"holds them. {gate.unauthenticated()}".rstrip()
            )
        seen = gate.unauthenticated()
        return ClusterError(
            f"rank {', '.join(map(str, missing))} did not connect to this kernel {waited} "
            f"(listening on {host}:{port}): can the nodes reach this kernel at that address? "
            "(RayCluster(timeout=...) waits longer)" + (f"; {seen}" if seen else "")
        )

    def _check_nodes(self, deadline: float, every: bool = False) -> None:
        """Read the actors' environment checks that came in; a :class:`ClusterError` names each
        node that lacks something, and what. With ``every``, or once some node lacks
        something (so that every such node is named), waits for the checks still out until
        ``deadline`` (``time.monotonic()``)."""
        ray = self.ray
        here = _here()
        while self._checks:
            ready, _ = ray.wait(list(self._checks), num_returns=len(self._checks), timeout=0)
            for ref in ready:
                rank = self._checks.pop(ref)
                try:
                    self._answers[rank] = ray.get(ref)
                except Exception as error:  # the actor could not start, or not answer
                    self._answers[rank] = error
            left = deadline - time.monotonic()
            if not self._checks or left <= 0 or not (every or self._lacking(here)):
                break
            ray.wait(list(self._checks), num_returns=1, timeout=min(left, PLACEMENT_POLL))
        lacking = self._lacking(here)
        if lacking:
            raise ClusterError(report(*lacking, self._modules))

    def _lacking(self, here: Any) -> tuple | None:
        """What the answers so far say the nodes lack (:func:`report`'s problems and torch
        note), or None: nothing, or only torch versions with answers still out."""
        problems, torch_note = problems_by_node(self._answers, self.placement, here)
        if problems or (torch_note is not None and not self._checks):
            return problems, torch_note
        return None

    # -- watching ---------------------------------------------------------------------------

    def _watch(self) -> None:
        ray = self.ray
        self._last_tick = time.monotonic()
        while not self._released:
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
        limit = self.settings.node_timeout
        listening: dict[str, list[RemoteHandle]] = {}
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
        alive = next((n.get("Alive") for n in self._nodes() if n.get("NodeID") == node_id), None)
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

    def _ended(self, handle: RemoteHandle, ref: Any) -> None:
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

    def _death(self, handle: RemoteHandle, error: BaseException) -> str | None:
        """Why a rank's actor died, as a report says it (None: the kernel killed it)."""
        if handle.rank in self._killed:
            return None
        text = str(error)
        lost = self.lost_node(handle, text)
        if lost is not None:
            return lost
        if "No module named" in text or getattr(error, "actor_init_failed", False):
            return (
                f"its Ray actor could not start: {first_lines(error)}. notebook_launcher and "
                "what the function imports must be installed on every node (or shipped with "
                "RayCluster(runtime_env={'py_modules': [...]} or {'pip': [...]}))"
            )
        return f"its Ray actor died: {first_lines(error)}"

    def lost_node(self, handle: RemoteHandle, text: str = "") -> str | None:
        """Why the rank ended if its node left the cluster (Ray's error ``text`` says so, or the
        cluster shows the node dead); None while the node is alive."""
        if self.placement is None:
            return None
        node_id = self.placement.node_ids[handle.rank]
        node = next((n for n in self._nodes() if n.get("NodeID") == node_id), {})
        if NODE_LOST not in text and node.get("Alive") is not False:
            return None
        ranks = self.placement.ranks_on(node_id)
        address = self.placement.addresses.get(node_id, "?")
        why = node.get("DeathReasonMessage") or _after(text, NODE_LOST)
        return (
            f"its node was lost: {handle.node.split(',')[0]} (address {address}, Ray node "
            f"{node_id}) left the cluster{f' ({why})' if why else ''}, with rank "
            f"{', '.join(map(str, ranks))} on it; the other ranks were stopped"
        )

    def _nodes(self) -> list[dict]:
        try:
            return self.ray.nodes()
        except Exception:
            return []

    # -- what the handles ask -----------------------------------------------------------------

    def kill(self, handle: RemoteHandle) -> None:
        self._killed.add(handle.rank)
        handle.process.killed = True
        if handle.actor is not None:
            try:
                self.ray.kill(handle.actor, no_restart=True)
            except Exception:  # already gone
                pass

    def fetch(self, data: bytes) -> bytes:
        """A return value a rank put into the object store (it is freed there once fetched)."""
        import ray.cloudpickle

        ref = ray.cloudpickle.loads(data)
        value = self.ray.get(ref)
        try:
            from ray._private.internal_api import free

            free([ref])
        except Exception:
            pass
        return value

    def _release(self) -> None:
        """Kill every actor, close the listener, remove the placement group."""
        for handle in self.handles:
            self.kill(handle)
        if self.relay is not None:
            self.relay.close()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(2.0)
        if self.placement is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.placement.group)
            except Exception as error:
                logger.info("could not remove the placement group: %s", error)
        for handle in self.handles:
            handle.process.release()
            handle.run = handle.actor = None


@functools.cache
def _here() -> Any:
    """This kernel's own environment (versions), described once."""
    return describe_node()


def _after(text: str, marker: str) -> str:
    rest = text.split(marker, 1)[-1] if marker in text else ""
    lines = [line.strip(" .\t") for line in rest.splitlines() if line.strip(" .\t")]
    return "; ".join(line for line in lines[1:] if not line.startswith("Node Id"))[:300]
