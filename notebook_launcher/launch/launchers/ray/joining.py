"""Joining a Ray cluster as its driver, and reserving room for every rank of a launch at once."""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from ....utils.environment import say
from ...errors import ClusterError
from .settings import RayCluster

logger = logging.getLogger(__name__)
INSTALL_HINT = 'pip install "notebook_launcher[ray]"'
PLACEMENT_POLL = 0.05  # seconds between looks at a placement group being reserved
REACH_RETRY = 0.5  # seconds between attempts to reach a cluster's control service
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_told: set[str] = set()  # the clusters this kernel already said it uses


def import_ray() -> Any:
    """The ``ray`` module; an ImportError naming the extra to install when it is missing."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            f"cluster='ray' runs the ranks on a Ray cluster, and Ray is not installed in this "
            f"kernel's environment ({error}). Install the `ray` extra: {INSTALL_HINT}"
        ) from error
    return ray


def join(settings: RayCluster) -> Any:
    """Be the driver of the cluster ``settings`` names, as ``ray.init()`` would choose it: the
    one this kernel already joined, ``address``, ``RAY_ADDRESS``, a cluster started on this
    machine, else a new local instance. Says once per cluster which one it uses.

    Raises:
        ClusterError: ``address`` names another cluster than the one this kernel joined (Ray
            allows one per driver), or its control service cannot be reached within
            ``settings.timeout`` (an interrupt ends the wait at once).
    """
    ray = import_ray()
    if ray.is_initialized():
        joined = getattr(ray.get_runtime_context(), "gcs_address", "") or ""
        if not same_cluster(settings.address, joined):
            raise ClusterError(
                f"RayCluster(address={settings.address!r}) names another cluster than the one "
                f"this kernel already joined ({joined or 'unknown address'}): a kernel is the "
                "driver of one Ray cluster at a time. Leave address out (or give that one) to "
                "use it, or call ray.shutdown() (or restart the kernel) to join another."
            )
        _say(ray, "uses the Ray cluster this kernel joined")
        return ray
    address = settings.address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        reach(address, settings.timeout)
    # Output travels over the launch's own socket, labelled by rank: Ray's copy of it would
    # print each line again, unlabelled, in whichever cell runs at the time.
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    started = getattr(getattr(ray._private.worker, "_global_node", None), "head", False)
    _say(ray, "started a local Ray instance" if started else "joined the Ray cluster")
    return ray


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a cluster address ("host:port", "ray://host:port"); None for one
    that names no such pair ("auto", "local")."""
    rest = address.strip().split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def same_cluster(address: str | None, joined: str) -> bool:
    """Whether ``address`` (a RayCluster's) names the cluster at ``joined`` (the GCS address
    this kernel joined), or names none in particular (None, "auto")."""
    wanted, have = host_port(address or ""), host_port(joined)
    if address is None or wanted is None or have is None:
        return address is None or address.strip().lower() == "auto"
    if wanted[1] != have[1]:
        return False
    return {wanted[0], have[0]} <= set(LOCAL_NAMES) or _resolved(wanted[0]) == _resolved(have[0])


def _resolved(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def reach(address: str, timeout: float) -> None:
    """Return once the control service at ``address`` accepts a TCP connection, trying again
    every :data:`REACH_RETRY` seconds; a :class:`ClusterError` after ``timeout`` seconds. (Ray
    itself keeps trying for minutes, in a call an interrupt cannot end.)"""
    target = host_port(address)
    if target is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection(target, timeout=max(0.1, min(REACH_RETRY * 2, left))):
                return
        except OSError as error:
            reason = error.strerror or type(error).__name__
            if isinstance(error, TimeoutError | socket.timeout):
                reason = "no answer"
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterError(
                f"could not reach the Ray cluster at {address}: its control service (GCS) did "
                f"not accept a connection within {timeout:g} s ({reason}). Is the cluster "
                "running, and is this its head node's address (as `ray start --head` printed "
                "it)? RayCluster(timeout=...) sets how long to try."
            )
        time.sleep(min(REACH_RETRY, left))


def uploaded(ray: Any, runtime_env: Any) -> dict | None:
    """``runtime_env`` with its local code (``py_modules`` given as folders, files or imported
    modules, a local ``working_dir``) uploaded to the cluster and named by URI, as ``ray.init``
    does for a whole job, so that the ranks' actors can take it too."""
    if runtime_env is None:
        return None
    env = dict(runtime_env)
    if "py_modules" not in env and "working_dir" not in env:
        return env
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    node = getattr(ray._private.worker.global_worker, "node", None)
    scratch = node.get_runtime_env_dir_path() if node is not None else None
    for upload in (upload_py_modules_if_needed, upload_working_dir_if_needed):
        env = upload(env, include_gitignore=True, scratch_dir=scratch, logger=logger)
    env.pop("excludes", None)  # what was left out of the upload: nothing for Ray to check
    return env


def _say(ray: Any, what: str) -> None:
    context = ray.get_runtime_context()
    address = getattr(context, "gcs_address", "") or ""
    if address in _told:
        return
    _told.add(address)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    cpus, gpus = total.get("CPU", 0), total.get("GPU", 0)
    text = (
        f"notebook_launcher: {what} at {address} ({len(nodes)} node"
        f"{'s' if len(nodes) != 1 else ''}, {_amount(cpus)} CPUs"
        + (f", {_amount(gpus)} GPUs" if gpus else "")
        + ")"
    )
    logger.info(text)
    say(text)


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Placement:
    """Where the ranks of one attempt run: their placement group and, for each rank, its bundle,
    node and place among the node's ranks."""

    group: Any
    bundles: tuple[int, ...]  # rank -> bundle index
    node_ids: tuple[str, ...]  # rank -> Ray node id
    node_ranks: tuple[int, ...]  # rank -> index of its node (in order of first rank)
    local_ranks: tuple[int, ...]  # rank -> its index among its node's ranks
    addresses: dict[str, str]  # node id -> address

    @property
    def num_nodes(self) -> int:
        return len(set(self.node_ids))

    def local_world_size(self, rank: int) -> int:
        return self.node_ids.count(self.node_ids[rank])

    def node_label(self, rank: int) -> str:
        """'node 1 at 10.0.0.5, Ray node 4d465432' (the node's name in errors)."""
        node = self.node_ids[rank]
        return (
            f"node {self.node_ranks[rank]} at {self.addresses.get(node, '?')}, Ray node {node[:8]}"
        )

    def row_label(self, rank: int) -> str:
        """'1 · 10.0.0.5' (the node in a rank's status row)."""
        return f"{self.node_ranks[rank]} · {self.addresses.get(self.node_ids[rank], '?')}"

    def ranks_on(self, node_id: str) -> list[int]:
        return [rank for rank, node in enumerate(self.node_ids) if node == node_id]


def reserve(ray: Any, settings: RayCluster, ranks: int) -> Placement:
    """A placement group of one bundle per rank, reserved at once (all ranks start or none),
    within ``settings.timeout``; a :class:`ClusterError` says what was requested and what the
    cluster has if it cannot be."""
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles = [settings.resources for _ in range(ranks)]
    group = placement_group(bundles, strategy=settings.placement.upper())
    deadline = time.monotonic() + settings.timeout
    try:
        while True:
            ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_POLL)
            if ready:
                ray.get(ready[0])
                break
            if time.monotonic() >= deadline:
                raise ClusterError(_cannot_hold(ray, settings, ranks))
        table = ray.util.placement_group_table(group)
        by_bundle = {int(b): node for b, node in table["bundles_to_node_id"].items()}
    except BaseException:
        remove_placement_group(group)
        raise
    order: list[str] = []  # nodes in order of their first bundle
    for index in range(ranks):
        if by_bundle[index] not in order:
            order.append(by_bundle[index])
    ranked = sorted(range(ranks), key=lambda b: (order.index(by_bundle[b]), b))
    node_ids = tuple(by_bundle[b] for b in ranked)
    local = tuple(node_ids[:rank].count(node) for rank, node in enumerate(node_ids))
    addresses = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}
    return Placement(
        group=group,
        bundles=tuple(ranked),
        node_ids=node_ids,
        node_ranks=tuple(order.index(node) for node in node_ids),
        local_ranks=local,
        addresses=addresses,
    )


def _cannot_hold(ray: Any, settings: RayCluster, ranks: int) -> str:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total, free = ray.cluster_resources(), ray.available_resources()
    has = []
    for name, amount in settings.resources_per_process:
        if amount <= 0:
            continue
        holding = sum(1 for n in nodes if n.get("Resources", {}).get(name, 0) > 0)
        has.append(
            f"{_amount(total.get(name, 0))} {name} on {holding} node{'s' if holding != 1 else ''}"
            f" ({_amount(free.get(name, 0))} free now)"
        )
    return (
        f"{ranks} × {settings.describe()} requested (placement={settings.placement!r}); the "
        f"cluster has {'; '.join(has)}, and could not hold every rank at once within "
        f"{settings.timeout:g} s. Ask for fewer processes or smaller resources_per_process, "
        "add nodes, or free what other jobs hold."
    )


def first_lines(error: BaseException, count: int = 3) -> str:
    """The first ``count`` non-empty lines of ``error``'s text, on one line (its type's name
    if it has none)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return " ".join(lines[:count]) or type(error).__name__
