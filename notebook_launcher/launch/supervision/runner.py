"""Running a checked plan: start the workers, supervise them, restart on failure, collect results."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ...protocol import shared_files
from ...protocol.context import WorkerContext
from ...protocol.results import Received
from ...protocol.spec import WorkerSpec
from ..errors import AttemptFailed, interrupt_error
from ..launchers import Launcher, WorkerHandle, make_launcher
from ..planning.plan import LaunchPlan
from ..processes.signals import interrupts_deferred
from ..rendezvous import Attempt, Rendezvous, open_rendezvous
from ..result import LaunchResult
from .group import WorkerGroup
from .output import OutputSink
from .postmortem import cell_debugs_failures, debugged_on_rank, shell_wants_pdb
from .supervisor import DEADLOCK_AFTER, Supervisor

logger = logging.getLogger(__name__)


def launch(
    function: Callable[..., Any],
    args: tuple,
    plan: LaunchPlan,
    listeners: tuple[Callable[[object], None], ...] = (),
    stop: threading.Event | None = None,
    streams: tuple[Any, Any] | None = None,
) -> LaunchResult:
    """Run a plan the preflight passed: start, supervise, restart on failure, collect results.

    ``listeners`` get every event; setting ``stop`` tears the run down (LaunchStoppedError);
    ``streams`` replace the kernel's stdout and stderr for worker lines.
    """
    if cell_debugs_failures():
        plan = dataclasses.replace(plan, post_mortem=True)
    launcher, payload = prepared_launcher(plan, function, args)
    launcher.listeners = listeners  # the views show where its cluster job stands
    launcher.stop_requested = stop  # a stop while its cluster job is queued cancels it
    sink = output_sink(plan, streams)
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
                    logger.info(
                        "restarting all %d processes (restart %d of %d) after: %s",
                        plan.world_size,
                        restart + 1,
                        plan.max_restarts,
                        failed.summary,
                    )
                    sink.notice(
                        f"notebook_launcher: {failed.summary}; restarting all {plan.world_size} "
                        f"processes (restart {restart + 1} of {plan.max_restarts})"
                    )
                    continue
                if plan.post_mortem:  # the failing rank was debugged: not the kernel's frames
                    shell = shell_wants_pdb()
                    if shell is not None:
                        debugged_on_rank(shell, failed.error)
                raise failed.error from failed.error.__cause__
            values = [received.load() for received in payloads]
            return LaunchResult(
                values,
                restarts=restart,
                duration=time.monotonic() - started,
                outputs=sink.outputs(),
            )
    finally:
        with interrupts_deferred():
            sink.flush(final=True)
            rendezvous.close()
    raise AssertionError("unreachable")


def _attempt(
    plan: LaunchPlan,
    rendezvous: Rendezvous,
    launcher: Launcher,
    payload: Any,
    restart: int,
    deadline: float | None,
    sink: OutputSink,
    listeners: tuple[Callable[[object], None], ...],
    stop: threading.Event | None = None,
) -> list[Received]:
    # Joins the other nodes of a multi-node launch first; tells them if this attempt fails.
    with rendezvous.attempt(restart) as attempt:
        plan = attempt.plan  # a c10d rendezvous assigns this node's rank
        handles: list[WorkerHandle] = []
        supervisor = None
        interrupted = False
        try:
            start_workers(launcher, payload, plan, attempt, restart, handles.extend)
            supervisor = Supervisor(
                handles,
                sink,
                plan.stall_timeout,
                plan.monitor_interval,
                listeners,
                stop=stop,
                watch=attempt.watch,
                # Another node's ranks are unseen: one of them may still be computing.
                deadlock_after=None if plan.multi_node else DEADLOCK_AFTER,
                stall_notice=plan.stall_notice,
                stop_grace=plan.stop_grace,
            )
            payloads = supervisor.run(deadline)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            with interrupts_deferred():
                # Whatever happened, nothing of this attempt survives it.
                if supervisor is not None:
                    supervisor.teardown()
                else:
                    WorkerGroup(handles, sink, listeners, stop_grace=plan.stop_grace).teardown(
                        "interrupted", requested=True
                    )
        if interrupted:
            # A fresh exception, without the supervisor's frame the signal happened to hit:
            # that frame says nothing to the user, and on Python 3.11 it can sit at a bytecode
            # without a line number, which IPython then fails to format.
            raise interrupt_error("the kernel was interrupted; every worker has been stopped")
        attempt.finish(deadline)  # multi-node: the other nodes' ranks have returned too
        return payloads


def prepared_launcher(
    plan: LaunchPlan, function: Callable[..., Any], args: tuple
) -> tuple[Launcher, Any]:
    """The launcher of ``plan``, prepared, and the payload its workers get to run
    ``function(*args)``."""
    shared_files.reclaim_orphans()  # the shared memory of kernels that were killed
    launcher = make_launcher(plan)
    launcher.prepare()
    return launcher, launcher.payload(function, args)


def output_sink(plan: LaunchPlan, streams: tuple[Any, Any] | None = None) -> OutputSink:
    """Where the workers' lines go, labelled as ``plan`` says (``streams`` replace the
    kernel's stdout and stderr)."""
    stdout, stderr = streams or (None, None)
    return OutputSink(
        plan.output,
        lambda rank: plan.prefix(rank, rank % plan.num_processes),
        stdout=stdout,
        stderr=stderr,
        ranks=shown_ranks(plan),
    )


def shown_ranks(plan: LaunchPlan) -> range:
    """The ranks whose output reaches this kernel: this node's (another node's ranks print on
    their node), or every rank when they run on a Ray cluster."""
    return range(plan.world_size) if plan.cluster is not None else plan.node_ranks(plan.node_rank)


def start_workers(
    launcher: Launcher,
    payload: Any,
    plan: LaunchPlan,
    attempt: Attempt,
    restart: int,
    record: Callable[[list[WorkerHandle]], object],
    session: bool = False,
) -> list[WorkerHandle]:
    """Start this node's workers of attempt ``restart`` and tell the rendezvous they started.

    ``record`` is handed the workers before an interrupt can land, so whatever happens next,
    the caller knows every process it has to tear down.
    """
    specs = [
        worker_spec(plan, r, attempt.port, restart, session) for r in range(plan.num_processes)
    ]
    with interrupts_deferred():
        handles = launcher.start_group(specs, payload, time.monotonic())
        record(handles)
    attempt.workers_started()
    return handles


def worker_spec(
    plan: LaunchPlan, local_rank: int, port: int, restart: int, session: bool = False
) -> WorkerSpec:
    """What the worker of ``local_rank`` needs to join attempt ``restart`` at ``port``."""
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
        start_method=plan.start_method,
        session=session,
        post_mortem=plan.post_mortem and not session,
    )
