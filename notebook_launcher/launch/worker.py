"""Child bootstrap: everything a worker process does before and after the user's function."""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import os
import pickle
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ..events import WorkerFailed, WorkerFinished, WorkerStarted
from ..integrations import prepare_worker as prepare_integrations
from ..tracking import flush as flush_tracking
from .context import EventChannel, WorkerContext, set_context

STACK_DUMP_SIGNAL = signal.SIGUSR1
_PR_SET_PDEATHSIG = 1


def _load_libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


# Loaded once where this module is imported (the kernel), so forked workers do not each load it.
_LIBC = _load_libc()


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs, sent from the kernel (picklable for spawn)."""

    context: WorkerContext
    parent_pid: int
    threads: int
    rdzv_id: str
    max_restarts: int


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


def _die_with_parent(parent_pid: int) -> None:
    """Leave the kernel's process group and make sure the kernel's death kills this worker."""
    try:
        os.setpgid(0, 0)  # an interrupt aimed at the kernel's group must not hit the workers
    except OSError:
        pass
    try:
        (_LIBC or _load_libc()).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the kernel died before prctl took effect
        os._exit(1)


def _redirect_streams(stdout_conn: Any, stderr_conn: Any) -> None:
    """Point fds 1 and 2 at the kernel's pipes so C-level output is captured too."""
    inherited = (sys.stdout, sys.stderr)
    for conn, fd in ((stdout_conn, 1), (stderr_conn, 2)):
        os.dup2(conn.fileno(), fd)
        conn.close()
    # Fresh line-buffered text streams on the new fds replace whatever the kernel had
    # (ipykernel's OutStream would route output through the kernel's sockets).
    sys.stdout = sys.__stdout__ = open(  # noqa: SIM115
        1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    sys.stderr = sys.__stderr__ = open(  # noqa: SIM115
        2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    for old, new in zip(inherited, (sys.stdout, sys.stderr), strict=True):
        _forward_kernel_stream(old, new)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def _forward_kernel_stream(old: Any, new: Any) -> None:
    """Make a forked copy of the kernel's stream object write through ``new``.

    Objects set up in the notebook before the launch (a ``logging`` handler, a progress bar) keep
    the kernel's ``sys.stdout``/``sys.stderr``. In a forked worker ipykernel's copy would publish
    straight to the notebook, unlabelled and in fragments mixed with other ranks' output.
    """
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is None or not isinstance(old, iostream.OutStream):
        return
    old.write, old.writelines, old.flush = new.write, new.writelines, new.flush


def _reset_inherited_state() -> None:
    """A forked worker inherits the kernel's singletons; it must start from a clean slate."""
    state = sys.modules.get("notebook_launcher.state")
    if state is not None:
        state.reset_state()


def _dumps(value: Any) -> bytes:
    """Pickle ``value`` for the kernel: by reference where the kernel can look it up, else by value.

    Plain pickle first, so that a class or exception defined in the kernel's ``__main__`` (a
    notebook cell) comes back as the kernel's own class under fork (``isinstance`` and ``except``
    work); cloudpickle would send a copy of the class. Anything plain pickle refuses (lambdas,
    local classes, classes cloudpickle rebuilt under spawn) goes by value with cloudpickle.
    """
    import cloudpickle

    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(value)


def _failure(rank: int, exc: BaseException) -> WorkerFailed:
    try:
        payload = _dumps(exc)
        pickle.loads(payload)
    except Exception:
        payload = None
    kind = type(exc)
    return WorkerFailed(
        rank=rank,
        exc_type=f"{kind.__module__}.{kind.__qualname__}",
        message=str(exc),
        traceback="".join(traceback.format_exception(kind, exc, exc.__traceback__)),
        payload=payload,
        time=time.time(),
    )


def _result_event(rank: int, value: Any) -> WorkerFinished:
    from ..utils.tree import to_cpu

    try:
        payload = _dumps(to_cpu(value))
    except Exception as exc:
        raise TypeError(
            f"rank {rank} returned a value that cannot be pickled and sent back to the kernel: "
            f"{type(value).__name__} ({exc}). Return plain Python objects or tensors."
        ) from exc
    return WorkerFinished(rank=rank, payload=payload, time=time.time())


def _call(spec: WorkerSpec, payload: Any, channel: EventChannel) -> int:
    rank = spec.context.rank
    try:
        prepare_integrations(spec.context)  # before unpickling: that may import the libraries
        if isinstance(payload, bytes):  # spawn ships (function, args) by value
            import cloudpickle

            payload = cloudpickle.loads(payload)
        function, args = payload
        channel.send(WorkerStarted(rank=rank, pid=os.getpid(), time=time.time()))
        try:
            value = function(*args)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
            value = None
        event = _result_event(rank, value)
    except BaseException as exc:  # report everything, KeyboardInterrupt included
        _send_tracked()
        _flush()
        channel.send(_failure(rank, exc))
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        return code or 1
    _send_tracked()
    _flush()
    channel.send(event)
    return 0


def _send_tracked() -> None:
    """Send what the function logged (metrics, progress, status) ahead of its last event, so the
    kernel holds every value a rank logged before it returned."""
    try:
        flush_tracking()
    except Exception:  # a broken pipe: the last event will fail to send as well
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _shutdown_process_group() -> None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def run_worker(
    spec: WorkerSpec, payload: Any, event_conn: Any, stdout_conn: Any, stderr_conn: Any
) -> None:
    """Entry point of every worker process (the target of ``Process``)."""
    _die_with_parent(spec.parent_pid)
    _redirect_streams(stdout_conn, stderr_conn)
    os.environ.update(torchrun_environment(spec.context, spec))
    import torch

    torch.set_num_threads(spec.threads)
    _reset_inherited_state()
    channel = EventChannel(event_conn)
    set_context(dataclasses.replace(spec.context, channel=channel))
    code = _call(spec, payload, channel)
    _shutdown_process_group()
    _flush()
    event_conn.close()
    sys.exit(code)
