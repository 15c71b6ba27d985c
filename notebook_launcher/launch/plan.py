"""LaunchPlan: every decision about a launch, validated once, frozen, passed explicitly."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..utils.environment import available_cpu_count

MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16", "fp8")
START_METHODS = ("fork", "spawn")
RDZV_BACKENDS = ("static", "c10d")
OUTPUT_CHOICES = ("all", "main", "none")
DEFAULT_PREFIX_TEMPLATE = "[rank{rank}] "


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch will do. Built by :func:`make_plan`; never mutated."""

    num_processes: int  # processes on this node
    num_nodes: int
    node_rank: int
    start_method: str
    device: str  # "cpu", "cuda" or "xla"
    mixed_precision: str
    master_addr: str
    requested_port: int
    exact_port: bool  # multi-node jobs must use the port every node was told
    rdzv_backend: str
    rdzv_id: str
    max_restarts: int
    monitor_interval: float
    timeout: float | None
    stall_timeout: float | None
    threads_per_process: int
    output: str
    log_line_prefix_template: str

    @property
    def world_size(self) -> int:
        return self.num_processes * self.num_nodes

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.num_processes + local_rank

    def prefix(self, rank: int, local_rank: int) -> str:
        return self.log_line_prefix_template.format(
            rank=rank, local_rank=local_rank, node_rank=self.node_rank, role_name="default"
        )


def _bad(name: str, value: object, allowed: str, error: type[Exception] = ValueError) -> Exception:
    return error(f"{name}={value!r} is not valid: {allowed}.")


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, value, f"expected an int >= {minimum}")
    if value < minimum:
        raise _bad(name, value, f"expected an int >= {minimum}")
    return value


def _seconds(name: str, value: object, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(
            name, value, "expected a number of seconds > 0" + (" or None" if allow_none else "")
        )
    if not math.isfinite(value) or value <= 0:
        raise _bad(
            name, value, "expected a number of seconds > 0" + (" or None" if allow_none else "")
        )
    return float(value)


def _choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _bad(name, value, "allowed values are " + ", ".join(repr(c) for c in choices))
    return value  # type: ignore[return-value]


def _port(value: object) -> int:
    try:
        port = int(value)  # Accelerate passes the port as a string
    except (TypeError, ValueError):
        raise _bad("use_port", value, "expected a TCP port number between 0 and 65535")
    if isinstance(value, bool) or not 0 <= port <= 65535:
        raise _bad("use_port", value, "expected a TCP port number between 0 and 65535")
    return port


def _prefix_template(value: object) -> str:
    if value is None:
        return DEFAULT_PREFIX_TEMPLATE
    if not isinstance(value, str):
        raise _bad(
            "log_line_prefix_template", value, "expected a str such as '[rank{rank}] ' or None"
        )
    try:
        value.format(rank=0, local_rank=0, node_rank=0, role_name="default")
    except (KeyError, IndexError, ValueError) as exc:
        raise _bad(
            "log_line_prefix_template",
            value,
            f"the template may use {{rank}}, {{local_rank}}, {{node_rank}} and {{role_name}} ({exc!r})",
        )
    return value


def _xla_method(nprocs: int, nnodes: int, replicas: int, precision: object) -> str:
    """XLA launches: xmp.spawn starts one replica per device, so the count is not ours to pick."""
    if precision not in ("no", "bf16"):
        raise _bad("mixed_precision", precision, "XLA devices (TPUs) support 'no' and 'bf16'")
    if replicas and nprocs != replicas:
        raise _bad(
            "num_processes",
            nprocs,
            f"on this XLA host xmp.spawn starts one replica per device, {replicas} here; pass "
            f"num_processes={replicas} or None",
        )
    if nnodes != 1:
        raise _bad("num_nodes", nnodes, "XLA launches run on one host (num_nodes=1)")
    return "xla"


def make_plan(
    *,
    num_processes: object,
    mixed_precision: object,
    use_port: object,
    master_addr: object,
    node_rank: object,
    num_nodes: object,
    rdzv_backend: object,
    rdzv_endpoint: object,
    rdzv_id: object,
    max_restarts: object,
    monitor_interval: object,
    log_line_prefix_template: object,
    start_method: object,
    timeout: object,
    stall_timeout: object,
    threads_per_process: object,
    output: object,
    device: str,
    gpu_count: int,
) -> LaunchPlan:
    """Validate user input and decide everything a launch needs.

    Raises:
        ValueError: naming the parameter, the value received and what is allowed.
        NotImplementedError: for multi-node launches, which this version does not run.
    """
    if num_processes is None:
        if device != "cpu" and gpu_count > 0:  # every GPU, or every XLA device (TPU core)
            num_processes = gpu_count
        else:
            raise _bad(
                "num_processes",
                None,
                f"this machine has no GPU, so say how many CPU processes to start, "
                f"e.g. num_processes=2 (it has {available_cpu_count()} usable cores)",
            )
    nprocs = _int("num_processes", num_processes, 1)
    nnodes = _int("num_nodes", num_nodes, 1)
    nrank = _int("node_rank", node_rank, 0)
    if nrank >= nnodes:
        raise _bad("node_rank", nrank, f"expected 0 <= node_rank < num_nodes={nnodes}")
    if nnodes > 1:
        raise NotImplementedError(
            f"num_nodes={nnodes}: multi-node launches are not supported by this version; "
            "use num_nodes=1"
        )
    rdzv = _choice("rdzv_backend", rdzv_backend, RDZV_BACKENDS)
    if not isinstance(rdzv_endpoint, str):
        raise _bad("rdzv_endpoint", rdzv_endpoint, "expected a 'host:port' string or ''")
    if not isinstance(master_addr, str) or not master_addr:
        raise _bad("master_addr", master_addr, "expected a host name or IP address string")
    if not isinstance(rdzv_id, str):
        raise _bad("rdzv_id", rdzv_id, "expected a str")
    method = _choice("start_method", start_method, START_METHODS)
    if device == "xla":  # replicas are started by torch_xla's xmp.spawn, which forks
        method = _xla_method(nprocs, nnodes, gpu_count, mixed_precision)
    threads = threads_per_process
    if threads is None:
        threads = max(1, available_cpu_count() // nprocs)
    threads = _int("threads_per_process", threads, 1)
    return LaunchPlan(
        num_processes=nprocs,
        num_nodes=nnodes,
        node_rank=nrank,
        start_method=method,
        device=device,
        mixed_precision=_choice("mixed_precision", mixed_precision, MIXED_PRECISION_CHOICES),
        master_addr=master_addr,
        requested_port=_port(use_port),
        exact_port=nnodes > 1,
        rdzv_backend=rdzv,
        rdzv_id=rdzv_id,
        max_restarts=_int("max_restarts", max_restarts, 0),
        monitor_interval=_seconds("monitor_interval", monitor_interval, allow_none=False),
        timeout=_seconds("timeout", timeout),
        stall_timeout=_seconds("stall_timeout", stall_timeout),
        threads_per_process=threads,
        output=_choice("output", output, OUTPUT_CHOICES),
        log_line_prefix_template=_prefix_template(log_line_prefix_template),
    )
