"""What the user asked for: :class:`LaunchSettings`, one frozen record of every setting of a launch,
with every default in one place, each setting checked once (naming the parameter, the value and
what is allowed) when the record is made.

``notebook_launcher``, ``launch_in_background`` and ``LaunchPanel`` each build one; the planner
(:mod:`.planner`) then decides, with the machine's facts, what the launch will do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...ui import check_ui
from ...utils.enums import MIXED_PRECISION_CHOICES
from ...utils.validation import check_int_in, check_seconds, invalid
from ..launchers import AUTO_START_METHOD, START_METHODS
from ..launchers.clusters import check_cluster, check_cluster_settings
from ..rendezvous.checks import check_rdzv_conf, parse_endpoint

# Upper bounds: a value past them is a typo (or a fuzzer), never a plan.
MOST_NODES = 65536
MOST_RESTARTS = 100
MONITOR_INTERVAL_RANGE = (0.001, 5.0)  # seconds
MOST_STOP_GRACE = 60.0  # seconds: a stop should never keep the user waiting longer
RDZV_BACKENDS = ("static", "c10d")
OUTPUT_CHOICES = ("all", "raw", "main", "none")
DEFAULT_PREFIX_TEMPLATE = "[rank{rank}] "
DEFAULT_MULTINODE_PREFIX_TEMPLATE = "[node{node_rank}:{local_rank} rank{rank}] "


@dataclass(frozen=True)
class LaunchSettings:
    """Every setting of a launch, as :func:`~notebook_launcher.notebook_launcher` takes them.

    The defaults here are the defaults everywhere (the launch functions' signatures and the
    config panel read them from :data:`DEFAULTS`). Making a record checks every setting that
    can be checked without looking at the machine, and brings some to one form: ``use_port``
    becomes an int (Accelerate passes a str) and ``rdzv_conf`` a sorted tuple of items.
    How many processes this machine can take, which start method and precisions its device
    allows, are the planner's to check.

    Raises:
        TypeError, ValueError: naming the setting, the value received and what is allowed.
    """

    num_processes: int | None = None
    mixed_precision: str = "no"
    use_port: int = 29500
    master_addr: str = "127.0.0.1"
    node_rank: int = 0
    num_nodes: int = 1
    rdzv_backend: str = "static"
    rdzv_endpoint: str = ""
    rdzv_conf: Any = None  # a mapping of torch's rendezvous settings; stored as sorted items
    rdzv_id: str = "none"
    max_restarts: int = 0
    monitor_interval: float = 0.1
    log_line_prefix_template: str | None = None
    start_method: str = "fork"
    timeout: float | None = None
    stall_timeout: float | None = 900.0
    stall_notice: float | None = 60.0
    stop_grace: float = 3.0
    threads_per_process: int | None = None
    output: str = "all"
    ui: str = "auto"
    rdzv_timeout: float = 300.0
    cluster: Any = None  # None (this machine), "ray" or a RayCluster; kept as a RayCluster

    def __post_init__(self) -> None:
        for name, value in _checked(self).items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_options(cls, **options: Any) -> LaunchSettings:
        """A record from keyword settings; a name that is no setting raises a TypeError
        naming it and the settings there are."""
        unknown = sorted(set(options) - set(NAMES))
        if unknown:
            raise TypeError(
                f"{', '.join(unknown)} {'is not a setting' if len(unknown) == 1 else 'are not settings'} "
                f"of notebook_launcher; the settings are: {', '.join(NAMES)}"
            )
        return cls(**options)

    def replace(self, **changes: Any) -> LaunchSettings:
        """A copy with ``changes`` (checked like any new record)."""
        unknown = sorted(set(changes) - set(NAMES))
        if unknown:
            raise TypeError(f"{', '.join(unknown)}: not settings of notebook_launcher")
        return dataclasses.replace(self, **changes)

    @property
    def multi_node(self) -> bool:
        return self.num_nodes > 1


NAMES = tuple(field.name for field in dataclasses.fields(LaunchSettings))


def _checked(settings: LaunchSettings) -> dict[str, Any]:
    """Every setting checked, in the order a user reads them, in its one form."""
    s = settings
    check_ui(s.ui)
    cluster = check_cluster(s.cluster)
    if cluster is not None:
        check_cluster_settings(cluster, {name: getattr(s, name) for name in NAMES})
    if s.num_processes is not None:
        check_int_in("num_processes", s.num_processes, 1)
    num_nodes = check_int_in("num_nodes", s.num_nodes, 1, MOST_NODES)
    node_rank = check_int_in("node_rank", s.node_rank, 0)
    if node_rank >= num_nodes:
        raise invalid("node_rank", node_rank, f"expected 0 <= node_rank < num_nodes={num_nodes}")
    rdzv = _choice("rdzv_backend", s.rdzv_backend, RDZV_BACKENDS)
    if not isinstance(s.master_addr, str) or not s.master_addr.strip():
        raise invalid("master_addr", s.master_addr, "expected a host name or IP address string")
    if not isinstance(s.rdzv_id, str) or not s.rdzv_id:
        raise invalid("rdzv_id", s.rdzv_id, "expected a non-empty str (the job id)")
    port = _port(s.use_port)
    _, endpoint_port = parse_endpoint(s.rdzv_endpoint, s.master_addr.strip(), port)
    conf = check_rdzv_conf(_as_mapping(s.rdzv_conf), rdzv, node_rank)
    check_seconds("rdzv_timeout", s.rdzv_timeout, allow_none=False)
    if num_nodes > 1 and (port if rdzv == "static" else endpoint_port) == 0:
        where = "use_port" if rdzv == "static" or not s.rdzv_endpoint.strip() else "rdzv_endpoint"
        raise invalid(
            where,
            s.use_port if where == "use_port" else s.rdzv_endpoint,
            "a multi-node launch needs the fixed port every node was told (1 to 65535), not 0",
        )
    _choice("start_method", s.start_method, (*START_METHODS, AUTO_START_METHOD))
    if s.threads_per_process is not None:
        check_int_in("threads_per_process", s.threads_per_process, 1)
    return {
        "use_port": port,
        "master_addr": s.master_addr.strip(),
        "rdzv_conf": conf,
        "mixed_precision": _choice("mixed_precision", s.mixed_precision, MIXED_PRECISION_CHOICES),
        "max_restarts": check_int_in("max_restarts", s.max_restarts, 0, MOST_RESTARTS),
        "monitor_interval": check_seconds(
            "monitor_interval",
            s.monitor_interval,
            allow_none=False,
            low=MONITOR_INTERVAL_RANGE[0],
            high=MONITOR_INTERVAL_RANGE[1],
        ),
        "timeout": check_seconds("timeout", s.timeout),
        "stall_timeout": check_seconds("stall_timeout", s.stall_timeout),
        "stall_notice": check_seconds("stall_notice", s.stall_notice),
        "stop_grace": check_seconds(
            "stop_grace", s.stop_grace, allow_none=False, high=MOST_STOP_GRACE
        ),
        "output": _choice("output", s.output, OUTPUT_CHOICES),
        "log_line_prefix_template": _prefix_template(s.log_line_prefix_template),
        "rdzv_timeout": float(s.rdzv_timeout),
        "cluster": cluster,
    }


def _as_mapping(conf: object) -> object:
    """A record's own ``rdzv_conf`` (sorted items, as it is kept) as the mapping it came from."""
    if isinstance(conf, tuple) and all(isinstance(i, tuple) and len(i) == 2 for i in conf):
        return dict(conf)
    return conf


def _choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise invalid(name, value, "allowed values are " + ", ".join(repr(c) for c in choices))
    return value  # type: ignore[return-value]


def _port(value: object) -> int:
    try:
        port = int(value)  # Accelerate passes the port as a string
    except (TypeError, ValueError):
        raise invalid("use_port", value, "expected a TCP port number between 0 and 65535")
    if isinstance(value, bool) or not 0 <= port <= 65535:
        raise invalid("use_port", value, "expected a TCP port number between 0 and 65535")
    return port


def _prefix_template(value: object) -> str | None:
    if value is None:
        return None  # the planner's default, for one node or several
    if not isinstance(value, str):
        raise invalid(
            "log_line_prefix_template", value, "expected a str such as '[rank{rank}] ' or None"
        )
    try:
        value.format(rank=0, local_rank=0, node_rank=0, role_name="default")
    except (KeyError, IndexError, ValueError) as exc:
        raise invalid(
            "log_line_prefix_template",
            value,
            f"the template may use {{rank}}, {{local_rank}}, {{node_rank}} and {{role_name}} ({exc!r})",
        )
    return value


DEFAULTS = LaunchSettings()
