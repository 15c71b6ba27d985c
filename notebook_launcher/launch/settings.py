"""From the settings a user passes to the :class:`LaunchPlan` a launch runs: :func:`plan_launch`
checks every setting (naming the parameter, the value and what is allowed) and decides the rest
with the device's backend and the start method's launcher."""

from __future__ import annotations

import math
import os

from ..backends import Backend, launch_backend
from ..ui import check_ui
from ..utils.enums import MIXED_PRECISION_CHOICES
from ..utils.environment import available_cpu_count
from ..utils.validation import invalid
from .launchers import AUTO_START_METHOD, LAUNCHERS, START_METHODS
from .plan import (
    DEFAULT_MULTINODE_PREFIX_TEMPLATE,
    DEFAULT_PREFIX_TEMPLATE,
    DEFAULT_RDZV_TIMEOUT,
    DEFAULT_STALL_NOTICE,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_STOP_GRACE,
    LOOPBACK,
    OUTPUT_CHOICES,
    RDZV_BACKENDS,
    LaunchPlan,
)
from .rendezvous.options import check_rdzv_conf, format_endpoint, node_wait, parse_endpoint

# Upper bounds: a value past them is a typo (or a fuzzer), never a plan.
CPU_PROCESSES_PER_CORE = 4  # CPU workers per usable core without MAX_PROCESSES_ENV
MAX_PROCESSES_ENV = "NOTEBOOK_LAUNCHER_MAX_PROCESSES"  # raises the CPU cap when set
MOST_NODES = 65536
MOST_RESTARTS = 100
MONITOR_INTERVAL_RANGE = (0.001, 5.0)  # seconds
LONGEST_WAIT = 30 * 24 * 3600.0  # 30 days: the most any timeout may be


def _int(name: str, value: object, minimum: int, maximum: int | None = None, why: str = "") -> int:
    allowed = (
        f"expected an int >= {minimum}"
        if maximum is None
        else f"expected an int >= {minimum} and <= {maximum}"
    )
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, value, allowed)
    if value < minimum or (maximum is not None and value > maximum):
        raise invalid(name, value, allowed + why)
    return value


MOST_STOP_GRACE = 60.0  # seconds: a stop should never keep the user waiting longer


def _seconds(
    name: str,
    value: object,
    allow_none: bool = True,
    low: float = 0.0,
    high: float = LONGEST_WAIT,
) -> float | None:
    if value is None and allow_none:
        return None
    allowed = (
        f"expected a number of seconds > 0 (and <= {high:g})"
        if low == 0
        else f"expected a number of seconds > 0 (from {low:g} to {high:g})"
    ) + (" or None" if allow_none else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, value, allowed)
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        raise invalid(name, value, allowed) from None
    if not math.isfinite(seconds) or seconds <= 0 or seconds < low or seconds > high:
        raise invalid(name, value, allowed)
    return seconds


def _most_cpu_processes() -> tuple[int, str]:
    """How many CPU workers a node may start, and where that number comes from."""
    cores = available_cpu_count()
    raw = os.environ.get(MAX_PROCESSES_ENV, "").strip()
    if not raw:
        most = CPU_PROCESSES_PER_CORE * cores
        return most, (
            f" ({CPU_PROCESSES_PER_CORE} per usable core, {cores} cores here; set the "
            f"environment variable {MAX_PROCESSES_ENV} to allow more)"
        )
    try:
        most = int(raw)
    except ValueError:
        most = 0
    if most < 1:
        raise invalid(MAX_PROCESSES_ENV, raw, "expected a positive int (environment variable)")
    return most, f" (the environment variable {MAX_PROCESSES_ENV}={most})"


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


def _prefix_template(value: object, multi_node: bool) -> str:
    if value is None:
        return DEFAULT_MULTINODE_PREFIX_TEMPLATE if multi_node else DEFAULT_PREFIX_TEMPLATE
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


def plan_launch(
    *,
    num_processes: object = None,
    mixed_precision: object = "no",
    use_port: object = "29500",
    master_addr: object = "127.0.0.1",
    node_rank: object = 0,
    num_nodes: object = 1,
    rdzv_backend: object = "static",
    rdzv_endpoint: object = "",
    rdzv_id: object = "none",
    max_restarts: object = 0,
    monitor_interval: object = 0.1,
    log_line_prefix_template: object = None,
    start_method: object = "fork",
    timeout: object = None,
    stall_timeout: object = DEFAULT_STALL_TIMEOUT,
    stall_notice: object = DEFAULT_STALL_NOTICE,
    stop_grace: object = DEFAULT_STOP_GRACE,
    threads_per_process: object = None,
    output: object = "all",
    rdzv_conf: object = None,
    rdzv_timeout: object = DEFAULT_RDZV_TIMEOUT,
    ui: object = "auto",
    backend: Backend | None = None,
) -> LaunchPlan:
    """Validate a launch's settings and decide everything it will do, starting nothing.

    Takes the settings of :func:`notebook_launcher` (all its parameters but ``function`` and
    ``args``, as keywords, with the same defaults) and returns the :class:`LaunchPlan` it would
    run: the device, the processes and their start method, ports, timeouts, threads. The
    background launcher and the config panel start from it too.

    A single-node plan keeps the rendezvous on 127.0.0.1 whatever ``master_addr`` says; the
    rendezvous settings only matter with ``num_nodes > 1``.

    Args:
        backend: the device to plan for; default: this machine's (an XLA host's devices, else
            its GPUs, else its CPU).

    Raises:
        ValueError, TypeError: naming the parameter, the value received and what is allowed.

    Example:
        >>> plan = plan_launch(num_processes=2, mixed_precision="bf16")
        >>> plan.world_size, plan.device, plan.start_method
        (2, 'cpu', 'fork')
    """
    check_ui(ui)
    backend = backend or launch_backend()
    devices = backend.device_count() if backend.accelerator else 0
    if num_processes is None:
        if devices > 0:  # every GPU, or every XLA device (TPU core)
            num_processes = devices
        else:
            raise invalid(
                "num_processes",
                None,
                f"this machine has no GPU, so say how many CPU processes to start, "
                f"e.g. num_processes=2 (it has {available_cpu_count()} usable cores)",
            )
    if devices > 0:  # GPUs and XLA devices: the launcher's check_group bounds the count
        nprocs = _int("num_processes", num_processes, 1)
    else:
        most, why = _most_cpu_processes()
        nprocs = _int("num_processes", num_processes, 1, most, why)
    nnodes = _int("num_nodes", num_nodes, 1, MOST_NODES)
    nrank = _int("node_rank", node_rank, 0)
    if nrank >= nnodes:
        raise invalid("node_rank", nrank, f"expected 0 <= node_rank < num_nodes={nnodes}")
    rdzv = _choice("rdzv_backend", rdzv_backend, RDZV_BACKENDS)
    if not isinstance(master_addr, str) or not master_addr.strip():
        raise invalid("master_addr", master_addr, "expected a host name or IP address string")
    if not isinstance(rdzv_id, str) or not rdzv_id:
        raise invalid("rdzv_id", rdzv_id, "expected a non-empty str (the job id)")
    port = _port(use_port)
    host, endpoint_port = parse_endpoint(rdzv_endpoint, master_addr.strip(), port)
    conf = check_rdzv_conf(rdzv_conf, rdzv, nrank)
    wait = _seconds("rdzv_timeout", rdzv_timeout, allow_none=False)
    if nnodes > 1 and (port if rdzv == "static" else endpoint_port) == 0:
        where = "use_port" if rdzv == "static" or not rdzv_endpoint.strip() else "rdzv_endpoint"
        raise invalid(
            where,
            use_port if where == "use_port" else rdzv_endpoint,
            "a multi-node launch needs the fixed port every node was told (1 to 65535), not 0",
        )
    requested = _choice("start_method", start_method, (*START_METHODS, AUTO_START_METHOD))
    method = backend.start_method("fork" if requested == AUTO_START_METHOD else requested)
    if mixed_precision not in backend.precisions and set(backend.precisions) < set(
        MIXED_PRECISION_CHOICES
    ):
        allowed = " and ".join(map(repr, backend.precisions))
        raise invalid("mixed_precision", mixed_precision, f"{backend.label} support {allowed}")
    LAUNCHERS[method].check_group(nprocs, nnodes, devices)
    threads = threads_per_process
    if threads is None:
        threads = max(1, available_cpu_count() // nprocs)
    cores = available_cpu_count()
    threads = _int("threads_per_process", threads, 1, cores, " (the usable cores of this machine)")
    return LaunchPlan(
        num_processes=nprocs,
        num_nodes=nnodes,
        node_rank=nrank,
        start_method=method,
        device=backend.name,
        mixed_precision=_choice("mixed_precision", mixed_precision, MIXED_PRECISION_CHOICES),
        master_addr=master_addr.strip() if nnodes > 1 else LOOPBACK,
        requested_port=port,
        exact_port=nnodes > 1,
        rdzv_backend=rdzv,
        rdzv_id=rdzv_id,
        max_restarts=_int("max_restarts", max_restarts, 0, MOST_RESTARTS),
        monitor_interval=_seconds(
            "monitor_interval",
            monitor_interval,
            allow_none=False,
            low=MONITOR_INTERVAL_RANGE[0],
            high=MONITOR_INTERVAL_RANGE[1],
        ),
        timeout=_seconds("timeout", timeout),
        stall_timeout=_seconds("stall_timeout", stall_timeout),
        stall_notice=_seconds("stall_notice", stall_notice),
        stop_grace=_seconds("stop_grace", stop_grace, allow_none=False, high=MOST_STOP_GRACE),
        threads_per_process=threads,
        output=_choice("output", output, OUTPUT_CHOICES),
        log_line_prefix_template=_prefix_template(log_line_prefix_template, nnodes > 1),
        rdzv_endpoint=format_endpoint(host, endpoint_port) if rdzv == "c10d" else "",
        rdzv_conf=conf,
        rdzv_timeout=node_wait(conf, rdzv, wait),
        ui=ui,
        auto_start_method=requested == AUTO_START_METHOD,
    )
