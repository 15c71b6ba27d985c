"""The entry points: validate -> plan -> preflight -> launcher -> supervise -> result."""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ..ui import check_ui
from ..utils.environment import cuda_device_count
from .base import Launcher, WorkerHandle
from .context import WorkerContext
from .errors import AttemptFailed
from .fork import ForkLauncher
from .output import OutputSink
from .plan import DEFAULT_RDZV_TIMEOUT, DEFAULT_STALL_TIMEOUT, LaunchPlan, make_plan
from .preflight import check_args, check_function, run_preflight
from .rendezvous import open_rendezvous
from .result import LaunchResult
from .signals import interrupts_deferred
from .spawn import SpawnLauncher
from .supervisor import Supervisor
from .worker import WorkerSpec
from .xla import XlaLauncher
from .xla_env import detect_xla

# How notebook_launcher runs a validated launch: None runs it here and now (blocking); a launch
# in the background sets a runner that starts a supervising thread instead.
_RUNNER: ContextVar[Callable[..., Any] | None] = ContextVar(
    "notebook_launcher_runner", default=None
)

LAUNCHERS: dict[str, type[Launcher]] = {
    "fork": ForkLauncher,
    "spawn": SpawnLauncher,
    "xla": XlaLauncher,
}


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str | int = "29500",
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
    *,
    start_method: str = "fork",
    timeout: float | None = None,
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
    threads_per_process: int | None = None,
    output: str = "all",
    ui: str = "auto",
    rdzv_timeout: float = DEFAULT_RDZV_TIMEOUT,
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
        num_processes: processes to start. Defaults to the number of GPUs; required on CPU.
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
        monitor_interval: longest pause, in seconds, between the supervisor's checks.
        log_line_prefix_template: prefix of each output line; may use ``{rank}``,
            ``{local_rank}``, ``{node_rank}``. Default ``"[rank{rank}] "``.
        start_method: "fork" (default; inherits everything) or "spawn" (fresh interpreters;
            function and arguments sent by value with cloudpickle).
        timeout: stop everything after this many seconds (None: no limit).
        stall_timeout: stop everything once a rank has shown no sign of life (no output, no
            events, no CPU use) for this many seconds; every rank's Python stack is shown first.
            None disables the check.
        threads_per_process: torch intra-op threads per worker; default: usable cores divided
            by the number of processes, so ranks do not fight over cores.
        output: "all" shows every rank's output, "main" only rank 0's, "none" nothing (the last
            lines of a failed rank are still part of its error).
        ui: live status and metrics while the run goes on: "widgets" (a status table and charts
            in the cell), "console" (plain-text status on stderr, rarely), "none", or "auto"
            (default: widgets in a Jupyter kernel, else the console). Worker output is shown
            as ``output`` says in every mode.
        rdzv_timeout: seconds each node waits for all nodes to arrive (default 300) before
            raising :class:`NodesMissingError` naming the missing nodes, ranks and address;
            ``rdzv_conf["join_timeout"]`` (c10d) or ``["timeout"]`` (static) take precedence.

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
    check_function(function)
    call_args = check_args(args)
    check_ui(ui)
    xla = detect_xla()  # a TPU host: replicas through xmp.spawn, one per core by default
    gpus = xla.replicas if xla.usable else cuda_device_count()
    plan = make_plan(
        num_processes=num_processes,
        mixed_precision=mixed_precision,
        use_port=use_port,
        master_addr=master_addr,
        node_rank=node_rank,
        num_nodes=num_nodes,
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        log_line_prefix_template=log_line_prefix_template,
        start_method=start_method,
        timeout=timeout,
        stall_timeout=stall_timeout,
        threads_per_process=threads_per_process,
        output=output,
        device="xla" if xla.usable else "cuda" if gpus else "cpu",
        gpu_count=gpus,
        rdzv_conf=rdzv_conf,
        rdzv_timeout=rdzv_timeout,
    )
    return _run_with_ui(function, call_args, plan, ui)


def debug_launcher(function: Callable[..., Any], args: tuple = (), num_processes: int = 2):
    """Run ``function(*args)`` on ``num_processes`` CPU processes, for testing distributed code.

    The same machinery as :func:`notebook_launcher`, forced onto the CPU (gloo) even where GPUs
    exist.

    Returns:
        A :class:`LaunchResult`, as :func:`notebook_launcher`.
    """
    check_function(function)
    call_args = check_args(args)
    plan = make_plan(num_processes=num_processes, device="cpu", gpu_count=0)
    return launch(function, call_args, plan)


def launch(
    function: Callable[..., Any],
    args: tuple,
    plan: LaunchPlan,
    listeners: tuple[Callable[[object], None], ...] = (),
    stop: threading.Event | None = None,
    streams: tuple[Any, Any] | None = None,
) -> LaunchResult:
    """Run a validated plan: preflight, start, supervise, restart on failure, collect results.

    ``listeners`` get every event; setting ``stop`` tears the run down (LaunchStoppedError);
    ``streams`` replace the kernel's stdout and stderr for worker lines.
    """
    run_preflight(function, args, plan)
    launcher = LAUNCHERS[plan.start_method]()
    launcher.prepare()
    payload = launcher.payload(function, args)
    stdout, stderr = streams or (None, None)
    sink = OutputSink(
        plan.output,
        lambda rank: plan.prefix(rank, rank % plan.num_processes),
        stdout=stdout,
        stderr=stderr,
    )
    started = time.monotonic()
    deadline = None if plan.timeout is None else started + plan.timeout
    rendezvous = open_rendezvous(plan, sink.notice)  # shared by the nodes of a multi-node launch
    try:
        for restart in range(plan.max_restarts + 1):
            try:
                payloads = _attempt(
                    plan, rendezvous, launcher, payload, restart, deadline, sink, listeners, stop
                )
            except AttemptFailed as failed:
                if restart < plan.max_restarts:
                    if getattr(failed.error, "stacks", None):  # a stall: its report is not raised
                        sink.notice(f"notebook_launcher: {failed.error}")
                    sink.notice(
                        f"notebook_launcher: {failed.summary}; restarting all {plan.world_size} "
                        f"processes (restart {restart + 1} of {plan.max_restarts})"
                    )
                    continue
                raise failed.error from failed.error.__cause__
            values = [pickle.loads(p) for p in payloads]
            return LaunchResult(values, restarts=restart, duration=time.monotonic() - started)
    finally:
        with interrupts_deferred():
            rendezvous.close()
    raise AssertionError("unreachable")


def _attempt(
    plan: LaunchPlan,
    rendezvous: Any,
    launcher: Launcher,
    payload: Any,
    restart: int,
    deadline: float | None,
    sink: OutputSink,
    listeners: tuple[Callable[[object], None], ...],
    stop: threading.Event | None = None,
) -> list[bytes]:
    # Joins the other nodes of a multi-node launch first; tells them if this attempt fails.
    with rendezvous.attempt(restart) as attempt:
        plan = attempt.plan  # a c10d rendezvous assigns this node's rank
        handles: list[WorkerHandle] = []
        supervisor = None
        interrupted = False
        try:
            for local_rank in range(plan.num_processes):
                spec = _spec(plan, local_rank, attempt.port, restart)
                with interrupts_deferred():  # a started worker is always recorded, so torn down
                    handles.append(launcher.start(spec, payload, time.monotonic()))
            attempt.workers_started()
            supervisor = Supervisor(
                handles,
                sink,
                plan.stall_timeout,
                plan.monitor_interval,
                listeners,
                stop=stop,
                watch=attempt.watch,
            )
            payloads = supervisor.run(deadline)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            with interrupts_deferred():
                # Whatever happened, nothing of this attempt survives it.
                if supervisor is None:
                    supervisor = Supervisor(handles, sink, plan.stall_timeout, 0.1, listeners)
                supervisor.teardown()
        if interrupted:
            # A fresh exception, without the supervisor's frame the signal happened to hit:
            # that frame says nothing to the user, and on Python 3.11 it can sit at a bytecode
            # without a line number, which IPython then fails to format.
            raise KeyboardInterrupt("the kernel was interrupted; every worker has been stopped")
        attempt.finish(deadline)  # multi-node: the other nodes' ranks have returned too
        return payloads


def _run_with_ui(function: Callable[..., Any], args: tuple, plan: LaunchPlan, ui: str) -> Any:
    """Run the launch with its view (status table, charts or console status) attached."""
    runner = _RUNNER.get()
    if runner is not None:
        return runner(function, args, plan, ui)
    from ..ui import create_view

    view = create_view(ui, plan.num_processes, plan.output, first_rank=plan.global_rank(0))
    try:
        result = launch(function, args, plan, listeners=(view,))
    finally:
        view.finish()
    result.panel = view.panel
    return result


def _spec(plan: LaunchPlan, local_rank: int, port: int, restart: int) -> WorkerSpec:
    context = WorkerContext(
        rank=plan.global_rank(local_rank),
        local_rank=local_rank,
        world_size=plan.world_size,
        local_world_size=plan.num_processes,
        node_rank=plan.node_rank,
        num_nodes=plan.num_nodes,
        master_addr=plan.master_addr,
        master_port=port,
        device=plan.device,
        mixed_precision=plan.mixed_precision,
        restart_count=restart,
    )
    return WorkerSpec(
        context=context,
        parent_pid=os.getpid(),
        threads=plan.threads_per_process,
        rdzv_id=plan.rdzv_id,
        max_restarts=plan.max_restarts,
    )
