"""Ray: each rank in a Ray actor of its own, anywhere on a Ray cluster, supervised from the kernel.

The kernel is the cluster's driver. Each attempt reserves one placement group for all its ranks
(all start or none), starts one actor per rank in it (owned by the kernel, so they die with it),
lets rank 0's actor host the job's rendezvous store, and gives every rank the torchrun
environment. Events and output come back over one authenticated socket per rank
(:mod:`..remote.links`), which the ranks' handles turn into what a local worker's pipes carry: the
worker group, supervisor, watchdogs and views are the same as for fork and spawn.

The parts: :mod:`.settings` (what a launch asks for), :mod:`.joining` (joining the cluster and
reserving an attempt's placement group), this module (the launcher, and one attempt: its actors
started, awaited and released), :mod:`.handle` (a rank that is an actor), :mod:`.watch` (the
watch over the ranks' runs, and how a rank's or node's end is worded) and :mod:`.node_check`
(what each node lacks).

Ray does what it is good at: scheduling, GPU assignment, shipping packages (``runtime_env``),
noticing a lost node, and moving large return values (through its object store).

Ray is imported only once a launch starts (:meth:`RayLauncher.prepare`).
"""

from __future__ import annotations

import functools
import logging
import os
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
from ..remote.links import Commands, Relay, new_handle
from .handle import RayHandle
from .joining import PLACEMENT_POLL, Placement, join, reserve, uploaded
from .node_check import problems_by_node, report
from .watch import RankWatch, lost_node

logger = logging.getLogger(__name__)
CHECK_WAIT = 5.0  # seconds the last answers get once every rank connected

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
        self.handles: list[RayHandle] = []
        self.placement: Placement | None = None
        self.relay: Relay | None = None
        self._killed: set[int] = set()
        self.watch: RankWatch | None = None
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
                RayHandle,
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
        self.watch = RankWatch(
            ray, self.handles, placement, self.settings.node_timeout, self._killed
        )
        self.watch.start()

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

    # -- what the handles ask -----------------------------------------------------------------

    def kill(self, handle: RayHandle) -> None:
        self._killed.add(handle.rank)
        handle.process.killed = True
        if handle.actor is not None:
            try:
                self.ray.kill(handle.actor, no_restart=True)
            except Exception:  # already gone
                pass

    def lost_node(self, handle: RayHandle, text: str = "") -> str | None:
        """Why the rank ended if its node left the cluster; None while the node is alive (or
        before the ranks have a place)."""
        if self.placement is None:
            return None
        return lost_node(self.ray, self.placement, handle, text)

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
        if self.watch is not None:
            self.watch.stop()
        for handle in self.handles:
            self.kill(handle)
        if self.relay is not None:
            self.relay.close()
        if self.watch is not None:
            self.watch.join(2.0)
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
