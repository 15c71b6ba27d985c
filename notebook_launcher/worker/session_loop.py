"""A session's worker: it joins the job once, then runs what the kernel sends until it is closed.

The loop is the "function" a session's workers are launched with (:func:`serve`), so everything a
launch does around a function (the torchrun environment, labelled output, live tracking, the stop
signal, the exit barrier) holds for a session too. Each command's outcome goes back as a launch's
``WorkerFinished`` or ``WorkerFailed`` followed by :class:`~notebook_launcher.protocol.session_messages.RankIdle`.

SIGINT interrupts the command running on this rank (the kernel sends it when the cell is
interrupted or another rank failed, once the rank said it took the call); between commands it is
ignored, so an interrupt that reaches every process of the kernel's process group leaves an idle
rank waiting. One that arrives while the rank is taking a call is kept until the call starts.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

from ..protocol import results
from ..protocol import session_messages as protocol
from ..protocol.context import current_context
from ..protocol.events import EventBatch
from ..protocol.session_messages import CellInterrupted, Command, RankBusy, RankIdle
from ..state import PartialState
from ..utils import cells
from . import prompts, stopping
from .regroup import GroupSockets, held_models, rebind
from .reporting import failure_event, flush_streams, result_event, send_live

REFORM_TIMEOUT = 120.0  # seconds a rank waits for the others to form the group again

_commands: Any = None  # the read end of this worker's command pipe
_taken: Any = None  # shared with the kernel: the number of the call this rank has taken
IDLE, TAKING, RUNNING = range(3)
_phase = IDLE  # SIGINT: ignored while idle, kept while taking a call, raised while it runs
_pending = False  # an interrupt arrived while the call was being taken


def attach(conn: Any, taken: Any = None) -> None:
    """Remember the command pipe and the shared value that says which call this rank has taken
    (set up by the bootstrap before :func:`serve` runs; without it the rank says so in a
    :class:`RankBusy` event)."""
    global _commands, _taken
    _commands, _taken = conn, taken


def _interrupt(signum: int, frame: Any) -> None:
    global _pending
    if _phase == RUNNING:
        raise CellInterrupted()
    if _phase == TAKING:
        _pending = True


def serve() -> None:
    """Join the job, then run the kernel's commands until it says close (or its pipe closes)."""
    global _phase, _pending
    conn = _commands
    if conn is None:
        raise RuntimeError("serve() runs only in a session's worker (it has no command pipe)")
    ctx = current_context()
    rank, channel = ctx.rank, ctx.channel
    owner = os.getppid() if ctx.shared_memory else None  # the kernel, which maps the results
    signal.signal(signal.SIGINT, _interrupt)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    sockets = GroupSockets(ctx.master_port)
    with sockets.recorded():
        state = PartialState()  # forms the process group
    generation = 0
    staged: dict[str, Any] = {}  # values pushed, bound on commit
    failed: list[Any] = []  # the traceback of the last call, if it failed here
    channel.send(RankIdle(rank, 0, _position(state)))
    while True:
        try:
            command = Command.from_bytes(conn.recv_bytes())
        except (EOFError, OSError):  # the kernel is gone
            return
        if command.kind == protocol.CLOSE:
            return
        if command.kind == protocol.COMMIT:  # every rank holds what the last push brought
            namespace.update(staged)
            staged = {}
            continue
        staged = {}  # a push not committed before the next command never takes effect
        if command.kind in (protocol.RUN, protocol.EXEC):
            failed.clear()  # the frames of the last failure are kept until the next call
        if command.kind == protocol.REFORM:
            generation += 1
            channel.send(_reform(state, sockets, rank, command.call, generation))
            continue
        _phase, _pending = TAKING, False
        # The kernel may interrupt from now on: it reads this when it has to (no message, so
        # it is not woken up for it).
        if _taken is not None:
            _taken.value = command.call
        else:
            channel.send(RankBusy(rank, command.call))
        try:
            _phase = RUNNING
            if _pending:
                raise CellInterrupted()
            value = _perform(command, namespace, staged, rank, failed)
            _phase = IDLE
            event = result_event(rank, value, owner)
        except stopping.RankStopped:  # asked to end: the rank leaves, reporting why
            _phase = IDLE
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the kernel
            _phase = IDLE
            if isinstance(exc, SystemExit) and exc.code in (None, 0):
                event = result_event(rank, None, owner)
            else:
                event = failure_event(rank, exc)
                if command.kind in (protocol.RUN, protocol.EXEC):
                    failed[:] = [exc.__traceback__]  # for a post-mortem (Session.debug)
            del exc
        sys.settrace(None)  # a debugger left stepping stops nowhere in the next call
        send_live(stop=False)  # the next call logs again
        flush_streams()
        channel.send(EventBatch((event, RankIdle(rank, command.call, _position(state)))))


def _perform(
    command: Command, namespace: dict[str, Any], staged: dict[str, Any], rank: int, failed: list
) -> Any:
    # Large values are mapped from the kernel's shared-memory files (every rank maps the same
    # ones, privately: a rank that writes into a value changes its own copy); the kernel removes
    # the files once the call has ended on every rank.
    body = results.receive(command.body, unlink=False).load() if command.body else None
    if command.kind == protocol.RUN:
        function, args, kwargs = body
        return function(*args, **kwargs)
    if command.kind == protocol.EXEC:
        source, filename, *more = body  # and the cell's name, and the ranks that run it
        shown, chosen = (more + [None, None])[:2]
        if chosen is not None and rank not in chosen:
            return None
        if shown:
            cells.NAMES[filename] = shown
        return run_source(source, filename, namespace)
    if command.kind == protocol.PUSH:
        staged.update(body)
        return None
    if command.kind == protocol.DEBUG:
        if body == rank:
            prompts.post_mortem(failed[0] if failed else None, rank)
        return None
    if command.kind == protocol.PULL:
        if body not in namespace:
            raise NameError(f"name {body!r} is not defined on this rank")
        return namespace[body]
    raise ValueError(f"unknown session command {command.kind!r}")


def run_source(source: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Run ``source`` in ``namespace`` as a notebook cell runs: the value of its last line when
    that is an expression, else None. ``filename`` names it in tracebacks (its lines are put in
    ``linecache``, so tracebacks show them)."""
    tree = ast.parse(source, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(tree, filename, "exec"), namespace)
    return eval(compile(last, filename, "eval"), namespace) if last is not None else None


prompts.ENTRY_CODES.update((_perform.__code__, run_source.__code__))


def _position(state: PartialState) -> tuple[int, ...]:
    try:
        return state.device_backend.collectives_position()
    except Exception:  # noqa: BLE001 - unknown: the kernel then forms the group again
        return (-2, time.monotonic_ns())


def _reform(
    state: PartialState, sockets: GroupSockets, rank: int, call: int, generation: int
) -> RankIdle:
    """Form the default process group again, under fresh store keys; the rank's namespace and
    everything else it holds are kept, and the ``DistributedDataParallel`` models built on the
    old group are rebound to the new one (see :mod:`.regroup`)."""
    import torch.distributed as dist

    ctx = current_context()
    try:
        state.device_backend.forget_collectives()
        models: list[Any] = []
        if dist.is_initialized():
            name = dist.get_backend()
            models = held_models(dist.distributed_c10d._get_default_group())
            sockets.sever()  # a peer still waiting in one of its collectives raises now
            dist.destroy_process_group()
        else:
            name = state.backend or state.device_backend.process_group_backend
        store = dist.TCPStore(
            ctx.master_addr,
            ctx.master_port,
            is_master=False,
            timeout=timedelta(seconds=REFORM_TIMEOUT),
        )
        prefixed = dist.PrefixStore(protocol.session_store_prefix(generation), store)
        with sockets.recorded():
            dist.init_process_group(
                name,
                store=prefixed,
                rank=ctx.rank,
                world_size=ctx.world_size,
                timeout=timedelta(seconds=REFORM_TIMEOUT),
            )
        state.device_backend.regrouped()
        unbound = rebind(models)
    except Exception as exc:  # noqa: BLE001 - said to the kernel: the session is then broken
        return RankIdle(rank, call, reformed=False, problem=f"{type(exc).__name__}: {exc}")
    return RankIdle(
        rank,
        call,
        _position(state),
        reformed=True,
        rebound=len(models) - len(unbound),
        unbound=tuple(unbound),
    )
