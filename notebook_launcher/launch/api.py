"""The blocking entry points: the settings (:class:`LaunchSettings`) planned and checked
(:func:`.planning.entry.checked_plan`), then run in this thread (:mod:`.supervision.runner`:
launcher -> worker group -> supervisor -> result) with their view."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends import CpuBackend
from ..ui import RunPanel, create_view
from .errors import shown_as_argument_errors
from .planning.entry import checked_plan, launch_named
from .planning.preflight import check_args, check_function
from .planning.settings import DEFAULTS as D
from .planning.settings import LaunchSettings
from .result import LaunchResult
from .supervision.runner import launch


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple = (),
    num_processes: int | None = D.num_processes,
    mixed_precision: str = D.mixed_precision,
    use_port: str | int = str(D.use_port),
    master_addr: str = D.master_addr,
    node_rank: int = D.node_rank,
    num_nodes: int = D.num_nodes,
    rdzv_backend: str = D.rdzv_backend,
    rdzv_endpoint: str = D.rdzv_endpoint,
    rdzv_conf: dict | None = None,
    rdzv_id: str = D.rdzv_id,
    max_restarts: int = D.max_restarts,
    monitor_interval: float = D.monitor_interval,
    log_line_prefix_template: str | None = None,
    *,
    start_method: str = D.start_method,
    timeout: float | None = D.timeout,
    stall_timeout: float | None = D.stall_timeout,
    stall_notice: float | None = D.stall_notice,
    stop_grace: float = D.stop_grace,
    threads_per_process: int | None = D.threads_per_process,
    output: str = D.output,
    ui: str = D.ui,
    rdzv_timeout: float = D.rdzv_timeout,
    cluster: Any = D.cluster,
) -> LaunchResult:
    """Run ``function(*args)`` in ``num_processes`` worker processes and return every result.

    Each worker gets the environment torchrun would set (``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` ...), so ``PartialState()`` or
    ``torch.distributed.init_process_group()`` inside ``function`` joins one job of
    ``num_processes`` ranks (gloo on CPU, nccl on GPUs). Output is shown line by line, labelled
    with the rank. The first rank to fail stops the others at once.

    Args:
        function: the training function; pass it, do not call it.
        args: positional arguments for ``function``.
        num_processes: processes to start. Defaults to the number of GPUs (at most that many);
            required on CPU, at most 4 per usable core unless the environment variable
            ``NOTEBOOK_LAUNCHER_MAX_PROCESSES`` sets another limit.
        mixed_precision: "no", "fp16", "bf16" or "fp8", handed to the workers' state.
        use_port: rendezvous port. On one node a free port is used if this one is taken; with
            several nodes node 0 listens on exactly ``master_addr:use_port``.
        master_addr: address of node 0, where the nodes meet (``rdzv_backend="static"``).
            A single-node launch keeps its rendezvous on 127.0.0.1 whatever this says.
        node_rank: this node's index, 0 to ``num_nodes - 1``; its processes get the global
            ranks ``node_rank * num_processes + local_rank``. With "c10d" the rendezvous
            assigns node ranks and this one is not used.
        num_nodes: number of nodes (machines, each running this call in its own notebook or
            process with the same ``num_processes``).
        rdzv_backend: "static" (node 0's kernel hosts a torch TCPStore at
            ``master_addr:use_port``) or "c10d" (torch's dynamic rendezvous at
            ``rdzv_endpoint``; the kernel that owns that address hosts its store).
        rdzv_endpoint: "host:port" of the c10d rendezvous; "" means ``master_addr:use_port``.
        rdzv_conf: torch's rendezvous settings: for "c10d" ``join_timeout``,
            ``last_call_timeout``, ``close_timeout``, ``heartbeat_timeout``, ``read_timeout``,
            ``keep_alive_interval``, ``keep_alive_max_attempt``, ``is_host``, ``store_type``
            ("tcp"); for "static" ``rank`` (must equal ``node_rank``) and ``timeout``.
        rdzv_id: job id, exported to workers as ``TORCHELASTIC_RUN_ID``; the c10d run id.
        max_restarts: restart the whole group up to this many times after a failure. With
            several nodes every node restarts together (a failure anywhere restarts all).
        monitor_interval: longest pause, in seconds, between the supervisor's checks (0.001
            to 5).
        log_line_prefix_template: prefix of each output line; may use ``{rank}``,
            ``{local_rank}``, ``{node_rank}``. Default ``"[rank{rank}] "``.
        start_method: "fork" (default; inherits everything), "spawn" (fresh interpreters;
            function and arguments sent by value with cloudpickle) or "auto" (fork, or spawn
            with a one-line notice when the kernel has initialised CUDA and the function and
            its arguments can travel by value).
        timeout: stop everything after this many seconds (None: no limit).
        stall_timeout: stop everything once no rank has made progress for this many seconds
            (progress: output, events, computation, I/O, or a Python stack that moved; a rank
            waiting in a collective or sleeping makes none); the error names the ranks that
            held the others up and shows every rank's Python stack. None disables the check.
        stall_notice: once no rank has made progress for this many seconds (default 60), say
            so in the cell and the status table, with where each rank is; nothing is stopped.
            Once per quiet spell; None disables it.
        stop_grace: seconds a rank being stopped (another rank failed, a timeout, a stall, an
            interrupt) has to run its ``finally`` blocks and ``atexit`` handlers after it gets
            ``KeyboardInterrupt``, before it is killed (default 3, at most 60).
        threads_per_process: torch intra-op threads per worker; default: usable cores divided
            by the number of processes, so ranks do not fight over cores.
        output: "all" shows every rank's output, a line that several ranks print alike (within
            0.25 s) once as ``[rank0-7] text``; "raw" every line of every rank as it comes;
            "main" only rank 0's; "none" nothing (the last lines of a failed rank are still
            part of its error, and ``result.output(rank)`` has every line in each case).
        ui: live status and metrics while the run goes on: "widgets" (a status table and charts
            in the cell), "console" (plain-text status on stderr, rarely), "none", or "auto"
            (default: widgets in a Jupyter kernel, else the console). Worker output is shown
            as ``output`` says in every mode.
        rdzv_timeout: seconds each node waits for all nodes to arrive (default 300) before
            raising :class:`NodesMissingError` naming the missing nodes, ranks and address;
            ``rdzv_conf["join_timeout"]`` (c10d) or ``["timeout"]`` (static) take precedence.
        cluster: None (default: this machine), ``"ray"``, or a :class:`RayCluster` with its
            options: each rank runs in a Ray actor of its own on a Ray cluster, joined as
            ``ray.init()`` joins one (or started locally), every guarantee above included.
            ``"slurm"`` or a :class:`SlurmCluster`: each rank a task of one Slurm job step,
            in the kernel's allocation or a job submitted (and cancelled) for the launch.
            ``num_processes`` is then the total number of ranks; ``start_method``,
            ``num_nodes``, ``node_rank``, ``master_addr`` and the rendezvous settings do not apply.

    Returns:
        A :class:`LaunchResult` with each rank's return value (tensors moved to the CPU); with
        several nodes, the values of this node's processes, in local-rank order.

    Raises:
        TypeError, ValueError: bad input, naming the parameter, the value and what is allowed.
        PreflightError: the kernel is in a state that would break the workers (says how to fix it).
        WorkersFailedError: a rank died or raised an exception that cannot be rebuilt here.
        LaunchTimeoutError, WorkerStalledError: ``timeout`` or ``stall_timeout`` expired.
        KeyboardInterrupt: the kernel was interrupted; every worker has been stopped.
        NodesMissingError: a node did not arrive within ``rdzv_timeout``.
        RemoteNodeFailedError: another node failed or stopped; this node's ranks were stopped.
        ClusterError: the Ray cluster cannot hold every rank, or a rank's actor cannot start.
        ImportError: ``cluster="ray"`` without Ray installed (names the ``ray`` extra).
        Any exception a rank raised, rebuilt with its own type, its notes naming the rank.

    Note:
        Unlike Accelerate's launcher this one returns the results, picks a free port when the
        requested one is taken on a single node, stops every rank as soon as one fails, and
        keyword-only extras (``start_method``, ``timeout``, ``stall_timeout``,
        ``threads_per_process``, ``output``, ``rdzv_timeout``) control supervision. With several
        nodes, a failure on one node stops every node and is reported on each, and the
        rendezvous listens only on the address it was given.

    Example:
        >>> def train(lr):
        ...     state = PartialState()
        ...     return state.process_index * lr
        >>> notebook_launcher(train, args=(0.1,), num_processes=2).values
        [0.0, 0.1]
    """
    with shown_as_argument_errors():
        check_function(function)
        call_args = check_args(args)
        settings = LaunchSettings(
            num_processes=num_processes,
            mixed_precision=mixed_precision,
            use_port=use_port,
            master_addr=master_addr,
            node_rank=node_rank,
            num_nodes=num_nodes,
            rdzv_backend=rdzv_backend,
            rdzv_endpoint=rdzv_endpoint,
            rdzv_conf=rdzv_conf,
            rdzv_id=rdzv_id,
            max_restarts=max_restarts,
            monitor_interval=monitor_interval,
            log_line_prefix_template=log_line_prefix_template,
            start_method=start_method,
            timeout=timeout,
            stall_timeout=stall_timeout,
            stall_notice=stall_notice,
            stop_grace=stop_grace,
            threads_per_process=threads_per_process,
            output=output,
            ui=ui,
            rdzv_timeout=rdzv_timeout,
            cluster=cluster,
        )
    return run_with_view(function, call_args, settings)


def debug_launcher(function: Callable[..., Any], args: tuple = (), num_processes: int = 2):
    """Run ``function(*args)`` on ``num_processes`` CPU processes, for testing distributed code.

    The same machinery as :func:`notebook_launcher`, forced onto the CPU (gloo) even where GPUs
    exist.

    Returns:
        A :class:`LaunchResult`, as :func:`notebook_launcher`.
    """
    with shown_as_argument_errors():
        check_function(function)
        call_args = check_args(args)
        settings = LaunchSettings(num_processes=num_processes)
    named = launch_named("foreground", function)
    with checked_plan(function, call_args, settings, named, backend=CpuBackend()) as plan:
        return launch(function, call_args, plan)


def run_with_view(
    function: Callable[..., Any], args: tuple, settings: LaunchSettings
) -> LaunchResult:
    """Plan ``settings``, check the kernel, and run the plan in this thread with the view
    ``settings.ui`` names (status table, charts or console status) attached, as
    :func:`notebook_launcher` does. The checks come before anything is shown."""
    with checked_plan(function, args, settings, launch_named("foreground", function)) as plan:
        view = create_view(
            settings.ui, plan.num_processes, plan.output, first_rank=plan.global_rank(0)
        )
        try:
            result = launch(function, args, plan, listeners=(view,))
        finally:
            view.finish()
    result.panel = RunPanel(view.model)
    return result
