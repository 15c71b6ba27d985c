"""Where a launch runs when it leaves this machine: :class:`RayCluster`, the settings of a launch on
a Ray cluster (``cluster="ray"`` or ``cluster=RayCluster(...)``), checked before anything starts.

Nothing here imports Ray: the settings are plain data, and the launcher that uses them
(:mod:`notebook_launcher.launch.launchers.ray`) imports Ray only when a launch starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....utils.validation import check_seconds, invalid, short_repr

CLUSTER_NAMES = ("ray",)
PLACEMENTS = ("pack", "spread")
DEFAULT_RESOURCES = (("CPU", 1.0),)
# The launch settings that belong to the hand-run multi-node path (or to one machine's processes)
# and mean nothing on a cluster, with the value that says "not used".
NOT_ON_A_CLUSTER = (
    ("num_nodes", 1, "the cluster decides where the ranks run (placement=)"),
    ("node_rank", 0, "every rank is started from this kernel"),
    ("master_addr", "127.0.0.1", "rank 0's actor hosts the rendezvous"),
    ("rdzv_backend", "static", "rank 0's actor hosts the rendezvous"),
    ("rdzv_endpoint", "", "rank 0's actor hosts the rendezvous"),
    ("start_method", "fork", "each rank runs in its own Ray actor process"),
    ("use_port", 29500, "rank 0's actor hosts the rendezvous on a free port of its node"),
)
# The keys Ray's runtime_env takes (ray 2.x); anything else would be passed on and ignored, or
# fail on the nodes long after the launch started.
RUNTIME_ENV_KEYS = (
    "config",
    "conda",
    "container",
    "env_vars",
    "excludes",
    "image_uri",
    "java_jars",
    "mpi",
    "nsight",
    "pip",
    "py_executable",
    "py_modules",
    "rocprof_sys",
    "uv",
    "working_dir",
    "worker_process_setup_hook",
)
TPU_RESOURCES = ("TPU",)
MIN_NODE_TIMEOUT = 3.0  # seconds: a few of the ranks' heartbeats


@dataclass(frozen=True)
class RayCluster:
    """Run the ranks of a launch or session on a Ray cluster, one Ray actor per rank.

    ``notebook_launcher(train, args, num_processes=8, cluster="ray")`` is the same as passing
    ``cluster=RayCluster()``. The kernel becomes the cluster's driver: it joins the cluster the
    way ``ray.init()`` does (a ``ray.init()`` already made, ``address``, the ``RAY_ADDRESS``
    environment variable, else a new local Ray instance) and says which one it joined.

    Args:
        address: the cluster to join ("auto", "host:port", "ray://..."); None: as ``ray.init()``.
        resources_per_process: what each rank reserves, e.g. ``{"CPU": 1, "GPU": 1}``; custom
            resources of your nodes work too (numbers, at least one above zero).
        placement: "pack" (fill few nodes first) or "spread" (one node after another).
        runtime_env: Ray's ``runtime_env`` for the ranks' actors (``pip``, ``py_modules``,
            ``env_vars`` ...), how code and packages reach the nodes; a key Ray does not take
            is refused.
        timeout: seconds to wait for the cluster's control service when joining it, for the
            cluster to hold every rank at once and for the ranks' actors to start (an error
            names what was requested and what the cluster has).
        node_timeout: seconds a node may send nothing at all (each rank sends a heartbeat every
            second, from a thread of its own) before it is taken as lost: frozen, cut off from
            this kernel, or gone without closing its connections. Ray's own health checks take
            about a minute to say so.

    Raises:
        TypeError, ValueError: naming the setting, the value received and what is allowed.
    """

    address: str | None = None
    resources_per_process: Any = field(default=DEFAULT_RESOURCES)
    placement: str = "pack"
    runtime_env: Any = None
    timeout: float = 60.0
    node_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.address is not None and (
            not isinstance(self.address, str) or not self.address.strip()
        ):
            raise invalid(
                "address", self.address, "expected None or the cluster's address as a str"
            )
        resources = _resources(self.resources_per_process)
        if self.placement not in PLACEMENTS:
            raise invalid(
                "placement",
                self.placement,
                "allowed values are " + ", ".join(map(repr, PLACEMENTS)),
            )
        _check_runtime_env(self.runtime_env)
        timeout = check_seconds("timeout", self.timeout, allow_none=False)
        node_timeout = check_seconds(
            "node_timeout", self.node_timeout, allow_none=False, low=MIN_NODE_TIMEOUT
        )
        object.__setattr__(self, "resources_per_process", resources)
        object.__setattr__(self, "timeout", float(timeout))
        object.__setattr__(self, "node_timeout", float(node_timeout))
        if self.runtime_env is not None:
            object.__setattr__(self, "runtime_env", _frozen(self.runtime_env))

    @property
    def resources(self) -> dict[str, float]:
        """What one rank reserves, as Ray takes it."""
        return dict(self.resources_per_process)

    @property
    def gpus(self) -> float:
        return self.resources.get("GPU", 0.0)

    def describe(self) -> str:
        """'{CPU: 1, GPU: 1}'."""
        return "{" + ", ".join(f"{k}: {_number(v)}" for k, v in self.resources_per_process) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _resources(value: object) -> tuple[tuple[str, float], ...]:
    """``resources_per_process`` as sorted ``(name, amount)`` pairs, every amount checked."""
    if isinstance(value, tuple) and all(isinstance(i, tuple) and len(i) == 2 for i in value):
        value = dict(value)  # a record's own, as it is kept
    if not isinstance(value, Mapping) or not value:
        raise invalid(
            "resources_per_process",
            value,
            'expected a non-empty dict of resource names and amounts, e.g. {"CPU": 1, "GPU": 1}',
            TypeError if not isinstance(value, Mapping) else ValueError,
        )
    items = []
    for name, amount in value.items():
        if not isinstance(name, str) or not name:
            raise invalid("resources_per_process", value, f"resource names are strs, got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise invalid(
                "resources_per_process",
                value,
                f"the amount of {name!r} must be a number, got {short_repr(amount)} "
                f"({type(amount).__name__})",
                TypeError,
            )
        if not math.isfinite(amount) or amount < 0:
            raise invalid(
                "resources_per_process",
                value,
                f"the amount of {name!r} must be a finite number >= 0, got {amount!r}",
            )
        if name in TPU_RESOURCES:
            raise invalid(
                "resources_per_process",
                value,
                "TPU ranks are not run on a Ray cluster; launch on the TPU host with "
                "notebook_launcher (no cluster=)",
            )
        if name == "GPU" and amount not in (0, 1) and not (0 < amount < 1):
            raise invalid(
                "resources_per_process",
                value,
                "each rank drives one GPU: GPU must be 1 (or a fraction of one)",
            )
        items.append((name, float(amount)))
    if not any(amount > 0 for _, amount in items):
        raise invalid("resources_per_process", value, "at least one amount must be above zero")
    return tuple(sorted(items))


def _check_runtime_env(env: object) -> None:
    """``runtime_env``: None or a dict whose keys are all keys Ray's runtime_env takes."""
    if env is None:
        return
    if not isinstance(env, Mapping):
        raise invalid("runtime_env", env, "expected None or a dict (Ray's runtime_env)")
    unknown = [key for key in env if key not in RUNTIME_ENV_KEYS]
    if unknown:
        raise invalid(
            "runtime_env",
            env,
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the keys Ray's runtime_env takes are {', '.join(RUNTIME_ENV_KEYS)}",
        )


def _frozen(env: Mapping) -> Any:
    """A runtime_env kept as given (a dict copy: the record must not change under the user)."""
    return dict(env)


def check_cluster(value: object) -> RayCluster | None:
    """``cluster=`` in its one form: None (this machine) or a :class:`RayCluster`."""
    if value is None or isinstance(value, RayCluster):
        return value
    if isinstance(value, str) and value.strip().lower() in CLUSTER_NAMES:
        return RayCluster()
    raise invalid(
        "cluster",
        value,
        "expected None (this machine), 'ray' or a RayCluster(...) (a Ray cluster)",
        TypeError if not isinstance(value, str) else ValueError,
    )


def check_cluster_settings(cluster: RayCluster, given: Mapping[str, Any]) -> None:
    """Refuse the settings that mean nothing on a cluster (``given``: the launch settings)."""
    for name, unused, why in NOT_ON_A_CLUSTER:
        value = given.get(name, unused)
        if value != unused and not (name == "use_port" and str(value).strip() == str(unused)):
            raise invalid(
                name,
                given[name],
                f"not used with cluster={_cluster_name(cluster)} ({why}); leave it out",
            )


def _cluster_name(cluster: RayCluster) -> str:
    return "'ray'" if cluster == RayCluster() else "RayCluster(...)"


__all__ = ["RayCluster", "check_cluster", "check_cluster_settings"]
