"""From :class:`LaunchSettings` to the :class:`LaunchPlan` a launch runs: the planner decides, with
the device's backend and the start method's launcher, what the settings leave open (how many
processes, which start method, how many threads, where the nodes meet), and refuses what this
machine cannot do."""

from __future__ import annotations

import os
from typing import Any

from ...backends import Backend, backend_for, launch_backend
from ...utils.environment import available_cpu_count
from ...utils.validation import check_int_in, invalid
from ..launchers import AUTO_START_METHOD, CLUSTER_START_METHOD, LAUNCHERS
from ..rendezvous.checks import format_endpoint, node_wait, parse_endpoint
from .plan import LOOPBACK, LaunchPlan
from .settings import DEFAULT_MULTINODE_PREFIX_TEMPLATE, DEFAULT_PREFIX_TEMPLATE, LaunchSettings

CPU_PROCESSES_PER_CORE = 4  # CPU workers per usable core without MAX_PROCESSES_ENV
MAX_PROCESSES_ENV = "NOTEBOOK_LAUNCHER_MAX_PROCESSES"  # raises the CPU cap when set


def plan_launch(
    settings: LaunchSettings | None = None, /, *, backend: Backend | None = None, **options: Any
) -> LaunchPlan:
    """Decide everything a launch will do, starting nothing.

    Takes a :class:`LaunchSettings`, or the settings of :func:`notebook_launcher` as keywords
    (all its parameters but ``function`` and ``args``, with the same defaults; with a record,
    keywords change it), and returns the :class:`LaunchPlan` it would run: the device, the
    processes and their start method, ports, timeouts, threads. The background launcher and the
    config panel start from it too.

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
    if settings is None:
        settings = LaunchSettings.from_options(**options)
    elif options:
        settings = settings.replace(**options)
    s = settings
    requested = s.start_method
    if s.cluster is not None:  # the cluster's nodes, not this machine, run the ranks
        backend, num_processes, method, threads = _on_cluster(s)
    else:
        backend = backend or launch_backend()
        devices = backend.device_count() if backend.accelerator else 0
        num_processes = _num_processes(s.num_processes, devices, backend)
        method = backend.start_method("fork" if requested == AUTO_START_METHOD else requested)
        LAUNCHERS[method].check_group(num_processes, s.num_nodes, devices)
        cores = available_cpu_count()
        threads = s.threads_per_process or max(1, cores // num_processes)
        threads = check_int_in(
            "threads_per_process", threads, 1, cores, " (the usable cores of this machine)"
        )
    if s.mixed_precision not in backend.precisions:
        allowed = " and ".join(map(repr, backend.precisions))
        raise invalid("mixed_precision", s.mixed_precision, f"{backend.label} support {allowed}")
    host, endpoint_port = parse_endpoint(s.rdzv_endpoint, s.master_addr, s.use_port)
    return LaunchPlan(
        num_processes=num_processes,
        num_nodes=s.num_nodes,
        node_rank=s.node_rank,
        start_method=method,
        device=backend.name,
        mixed_precision=s.mixed_precision,
        master_addr=s.master_addr if s.multi_node else LOOPBACK,
        requested_port=s.use_port,
        exact_port=s.multi_node,
        rdzv_backend=s.rdzv_backend,
        rdzv_id=s.rdzv_id,
        max_restarts=s.max_restarts,
        monitor_interval=s.monitor_interval,
        timeout=s.timeout,
        stall_timeout=s.stall_timeout,
        stall_notice=s.stall_notice,
        stop_grace=s.stop_grace,
        threads_per_process=threads,
        output=s.output,
        log_line_prefix_template=s.log_line_prefix_template
        or (DEFAULT_MULTINODE_PREFIX_TEMPLATE if s.multi_node else DEFAULT_PREFIX_TEMPLATE),
        rdzv_endpoint=format_endpoint(host, endpoint_port) if s.rdzv_backend == "c10d" else "",
        rdzv_conf=s.rdzv_conf,
        rdzv_timeout=node_wait(s.rdzv_conf, s.rdzv_backend, s.rdzv_timeout),
        auto_start_method=requested == AUTO_START_METHOD,
        cluster=s.cluster,
    )


def _on_cluster(s: LaunchSettings) -> tuple[Backend, int, str, int]:
    """The device, ranks, start method and threads of a launch on a cluster: each rank in an
    actor of its own, on CPUs, or on one GPU where each rank reserves one."""
    if hasattr(s.cluster, "layout"):  # Slurm: nodes x tasks per node
        nodes, per_node = s.cluster.layout(s.num_processes)
        s = s.replace(num_processes=nodes * per_node)
    if s.num_processes is None:
        raise invalid(
            "num_processes",
            None,
            "say how many ranks to start on the cluster, e.g. num_processes=4",
        )
    backend = backend_for("cuda" if s.cluster.gpus else "cpu")
    cpus = s.cluster.resources.get("CPU", 1.0)
    threads = s.threads_per_process or max(1, int(cpus))
    method = getattr(s.cluster, "start_method", CLUSTER_START_METHOD)
    return backend, s.num_processes, method, threads


def _num_processes(requested: int | None, devices: int, backend: Backend) -> int:
    """The processes to start on this node: every device when none was asked for; at most one
    per GPU, and a few per core on a CPU (the XLA launcher bounds its own count)."""
    if requested is None:
        if devices > 0:  # every GPU, or every XLA device (TPU core)
            return devices
        raise invalid(
            "num_processes",
            None,
            f"this machine has no GPU, so say how many CPU processes to start, "
            f"e.g. num_processes=2 (it has {available_cpu_count()} usable cores)",
        )
    if backend.name == "cuda" and requested > devices:
        # Extra ranks would share a GPU, which NCCL refuses only later, mid-set-up.
        raise invalid(
            "num_processes",
            requested,
            f"this machine has {devices} GPU{'s' if devices != 1 else ''}: at most one process "
            f"per GPU (num_processes <= {devices}; debug_launcher runs more on CPU processes)",
        )
    if devices > 0:
        return requested
    most, why = _most_cpu_processes()
    return check_int_in("num_processes", requested, 1, most, why)


def most_processes(backend: Backend | None = None) -> tuple[int, str]:
    """The most processes a launch on this machine starts, and where that number comes from
    (the bound :func:`notebook_launcher` holds ``num_processes`` to): one per GPU or XLA device,
    else a few per usable core.

    Args:
        backend: the device; default: this machine's.
    """
    backend = backend or launch_backend()
    devices = backend.device_count() if backend.accelerator else 0
    if devices > 0:
        return devices, f" (one per device; this machine has {devices} {backend.label})"
    return _most_cpu_processes()


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
