"""Child bootstrap: everything a worker process does before and after the user's function."""

from __future__ import annotations

import dataclasses
import faulthandler
import gc
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch

from ..backends import shared_memory
from ..integrations import prepare_worker as prepare_integrations
from ..protocol.channel import EventChannel
from ..protocol.context import WorkerContext, set_context
from ..protocol.events import WorkerStarted
from ..protocol.names import STACK_DUMP_SIGNAL
from ..protocol.spec import WorkerSpec
from ..state import reset_state
from ..utils.parent_death import die_with_parent
from . import exit_barrier, prompts, session_loop, stopping
from .reporting import failure_event, flush_streams, result_event, send_live
from .streams import ordered_streams


def torchrun_environment(ctx: WorkerContext, spec: WorkerSpec) -> dict[str, str]:
    """The variables torchrun would give this worker, so third-party code sees a normal job."""
    return {
        "RANK": str(ctx.rank),
        "LOCAL_RANK": str(ctx.local_rank),
        "WORLD_SIZE": str(ctx.world_size),
        "LOCAL_WORLD_SIZE": str(ctx.local_world_size),
        "GROUP_RANK": str(ctx.node_rank),
        "GROUP_WORLD_SIZE": str(ctx.num_nodes),
        "ROLE_RANK": str(ctx.rank),
        "ROLE_WORLD_SIZE": str(ctx.world_size),
        "ROLE_NAME": "default",
        "MASTER_ADDR": ctx.master_addr,
        "MASTER_PORT": str(ctx.master_port),
        # The kernel hosts the rendezvous store (as torchrun's agent does), so every rank,
        # rank 0 included, connects to it as a client and no worker binds a port of its own.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": str(ctx.restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(spec.max_restarts),
        "TORCHELASTIC_RUN_ID": spec.rdzv_id,
        "OMP_NUM_THREADS": str(spec.threads),
        "ACCELERATE_MIXED_PRECISION": ctx.mixed_precision,
    }


def redirect_streams(stdout_conn: Any, stderr_conn: Any) -> None:
    """Point fds 1 and 2 at the kernel's pipes so C-level output is captured too."""
    inherited = (sys.stdout, sys.stderr)
    for conn, fd in ((stdout_conn, 1), (stderr_conn, 2)):
        os.dup2(conn.fileno(), fd)
        conn.close()
    # New text streams replace whatever the kernel had (ipykernel's OutStream would route
    # output through the kernel's sockets): both write to fd 1's pipe, stderr tagged, so the
    # kernel reads them in the order they were written; fd 2 stays for C-level writes.
    sys.stdout, sys.stderr = ordered_streams(1)
    sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
    for old, new in zip(inherited, (sys.stdout, sys.stderr), strict=True):
        _forward_kernel_stream(old, new)
    # A forked kernel's hook sends a traceback as a notebook message, which ipykernel drops
    # from a forked process; Python's own prints it on the new stderr (torch wraps either).
    sys.excepthook = sys.__excepthook__
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    accept_stack_requests()


def accept_stack_requests() -> None:
    """Let stack requests in, once faulthandler answers them. The launcher starts a worker with
    STACK_DUMP_SIGNAL blocked (its default action would end the process): a request made before
    now is dropped (this rank had no stack of interest yet), later ones dump every stack."""
    while signal.sigtimedwait({STACK_DUMP_SIGNAL}, 0) is not None:
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {STACK_DUMP_SIGNAL})


def _forward_kernel_stream(old: Any, new: Any) -> None:
    """Make a forked copy of the kernel's stream object write through ``new``.

    Objects set up in the notebook before the launch (a ``logging`` handler, a progress bar) keep
    the kernel's ``sys.stdout``/``sys.stderr``. In a forked worker ipykernel's copy would publish
    straight to the notebook, unlabelled and in fragments mixed with other ranks' output.
    """
    old = getattr(old, "__wrapped__", old)  # forked while the kernel deferred its flushes
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is None or not isinstance(old, iostream.OutStream):
        return
    old.write, old.writelines, old.flush = new.write, new.writelines, new.flush


def take_stdin(rank: int, channel: EventChannel, receive: Callable[[], Any] | None) -> None:
    """Standard input, ``input()``, ``getpass()`` and debuggers of this rank ask the cell (see
    :mod:`.prompts`); ``receive`` waits for the kernel's answer (None: nobody can answer)."""
    prompts.install(prompts.RankPrompter(rank, channel.send, receive, flush_streams))


def set_up_process(spec: WorkerSpec) -> None:
    """The torchrun environment, torch's thread count, and no singleton inherited from the kernel
    (a forked worker starts from a clean slate)."""
    os.environ.update(torchrun_environment(spec.context, spec))
    torch.set_num_threads(spec.threads)
    reset_state()


def call_function(spec: WorkerSpec, payload: Any, channel: EventChannel) -> int:
    """Run the user's function, report its result or failure; the process's exit code."""
    rank = spec.context.rank
    try:
        prepare_integrations(spec.context)  # before unpickling: that may import the libraries
        if isinstance(payload, bytes):  # spawn ships (function, args) by value
            payload = cloudpickle.loads(payload)
        function, args = payload
        channel.send(WorkerStarted(rank=rank, pid=os.getpid(), time=time.time()))
        try:
            value = function(*args)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
            value = None
        except Exception as exc:
            if spec.post_mortem:
                debug_failure(exc, rank)
            raise
        finally:
            sys.settrace(None)  # a debugger left stepping stops nowhere in what follows
            stopping.leaving()  # what follows reports the outcome: a stop must not cut it short
        event = result_event(rank, value, spec.parent_pid)
    except BaseException as exc:  # report everything, KeyboardInterrupt included
        stopping.leaving()
        send_live()
        flush_streams()
        channel.send(failure_event(rank, exc))
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        return code or 1
    send_live()
    flush_streams()
    channel.send(event)
    return 0


prompts.ENTRY_CODES.add(call_function.__code__)


def debug_failure(exc: Exception, rank: int) -> None:
    """The debugger in the frame where ``exc`` was raised, before the failure is reported (the
    kernel's ``%pdb on``): the other ranks go on until the user leaves it (``c`` or ``q``).
    Where no prompt can be answered after all, the failure is reported as it is."""
    print(
        f"{''.join(traceback.format_exception_only(exc)).rstrip()}\n"
        f"post-mortem debugger of rank {rank} (%pdb on); c or q leaves it and the launch fails",
        file=sys.stderr,
    )
    try:
        prompts.post_mortem(exc.__traceback__, rank)
    except Exception as error:
        print(f"no post-mortem debugger: {error}", file=sys.stderr)


def shutdown_process_group(ending: bool = False) -> None:
    """Destroy the default process group if the function left one.

    ``ending``: the process ends right after, with ``os._exit`` (a forked worker), so a gloo
    group is left to go with it: its sockets close with the process, while destroying it waits
    out the polling interval of each of gloo's threads (about 20 ms).
    """
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            if ending and dist.get_backend() == "gloo":
                return
            dist.destroy_process_group()
    except Exception:
        pass


def run_worker(
    spec: WorkerSpec,
    payload: Any,
    event_conn: Any,
    stdout_conn: Any,
    stderr_conn: Any,
    commands_conn: Any = None,
    taken: Any = None,
    replies_conn: Any = None,
) -> None:
    """Entry point of every worker process (the target of ``Process``); a session's worker also
    gets the read end of its command pipe, and every worker the read end of the pipe the
    kernel answers its prompts on."""
    forked = spec.start_method == "fork"
    if forked:
        # Everything inherited from the kernel stays out of this process's garbage collections:
        # a collection would walk (and so copy, page by page) the kernel's whole heap, tens of
        # milliseconds per worker, and those objects are the kernel's to free.
        gc.freeze()
    die_with_parent(spec.parent_pid)
    stopping.stop_on_signal()
    if forked:
        stopping.forget_inherited_exit_handlers()
    redirect_streams(stdout_conn, stderr_conn)
    set_up_process(spec)
    channel = EventChannel(event_conn)
    set_context(dataclasses.replace(spec.context, channel=channel))
    take_stdin(spec.context.rank, channel, replies_conn.recv if replies_conn is not None else None)
    if commands_conn is not None:
        session_loop.attach(commands_conn, taken)
    try:
        code = call_function(spec, payload, channel)
    except stopping.RankStopped:  # the one stop, in the instants before leaving() took effect
        stopping.leaving()
        code = 1
    shared_memory.depart()  # a peer waiting for this rank in a collective raises at once
    if code == 0:  # a rank that failed or was stopped ends at once: the kernel stops the rest
        exit_barrier.wait_for_all_ranks(spec.context.restart_count)  # peers may still be joining
    shutdown_process_group(ending=forked)
    if forked:
        stopping.run_exit_handlers()
    flush_streams()
    event_conn.close()
    sys.exit(code)
