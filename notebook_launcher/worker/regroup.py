"""Forming a session's process group again while the rank's objects still hold the old one.

A failed call can leave a rank inside a collective, waiting for a peer that has already ended
the call. ``destroy_process_group`` does not release it: gloo closes its connections only when
the last reference to the group goes, and a ``DistributedDataParallel`` model kept between
cells holds one (so do ``accelerator.prepare``'s and Lightning Fabric's models, which wrap one).
So a rank that gives up the old group ends its connections itself:

* :class:`GroupSockets` notes the TCP connections this process opened while a group was formed
  (gloo's connections to the other ranks) and shuts them down on :meth:`~GroupSockets.sever`:
  the peer's pending receive fails at once ("connection closed by peer"), which ends the
  collective it waits in with an error, whatever holds the group; groups whose backend can
  abort (NCCL) are aborted too;
* :func:`held_models` finds the ``DistributedDataParallel`` models built on the default group,
  and :func:`rebind` builds their gradient reducer again on the new default group (the route
  torch takes when such a model is unpickled), keeping their communication hook, so the same
  model object keeps training in the next call.
"""

from __future__ import annotations

import contextlib
import gc
import socket
import sys
from collections.abc import Iterator
from typing import Any

import psutil

Address = tuple[str, int]


def _connections() -> set[tuple[int, Address, Address]]:
    """This process's established TCP connections: (fd, local address, remote address)."""
    try:
        found = psutil.Process().net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return set()
    return {
        (c.fd, tuple(c.laddr), tuple(c.raddr))
        for c in found
        if c.raddr and c.fd is not None and c.fd >= 0
    }


class GroupSockets:
    """The connections a process group of this rank made to the other ranks."""

    def __init__(self, store_port: int) -> None:
        self.store_port = store_port  # the rendezvous store's: not the group's to close
        self._pairs: set[tuple[Address, Address]] = set()

    @contextlib.contextmanager
    def recorded(self) -> Iterator[None]:
        """Note the connections opened while the body forms a group."""
        before = _connections()
        try:
            yield
        finally:
            opened = _connections() - before
            self._pairs |= {
                (mine, theirs) for _, mine, theirs in opened if theirs[1] != self.store_port
            }

    @property
    def count(self) -> int:
        return len(self._pairs)

    def sever(self) -> int:
        """Shut down every noted connection still open (the peers' reads then fail) and abort
        the groups whose backend can; how many connections were shut down."""
        shut = 0
        for fd, local, remote in _connections():
            if (local, remote) not in self._pairs:
                continue
            try:
                sock = socket.socket(fileno=fd)
            except OSError:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
                shut += 1
            except OSError:
                pass
            finally:
                sock.detach()  # the descriptor stays gloo's to close
        self._pairs.clear()
        _abort_groups()
        return shut


def _abort_groups() -> None:
    """Abort every process group whose backend supports it (NCCL's communicators); a no-op for
    gloo, whose connections :meth:`GroupSockets.sever` ends."""
    if "torch.distributed" not in sys.modules:
        return
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    world = dist.distributed_c10d._world
    for group in list(getattr(world, "pg_map", {})):
        try:
            group._get_backend(torch.device("cuda"))
        except (RuntimeError, AttributeError):
            continue  # no device backend to abort
        try:
            group.abort()
        except (RuntimeError, AttributeError):
            pass


def held_models(group: Any) -> list[Any]:
    """The ``DistributedDataParallel`` models of this process built on ``group``."""
    if group is None or "torch.nn.parallel" not in sys.modules:
        return []
    from torch.nn.parallel import DistributedDataParallel

    # type() rather than isinstance(): isinstance reads __class__, which some module-level
    # objects (deprecated aliases) answer with a warning.
    return [
        obj
        for obj in gc.get_objects()
        if issubclass(type(obj), DistributedDataParallel)
        and obj.__dict__.get("process_group") is group
    ]


def rebind(models: list[Any]) -> list[str]:
    """Build each model's gradient reducer again on the current default process group (its
    parameters, buffers, options and communication hook kept). The problems met, one line per
    model that could not be rebound (it must then be wrapped again)."""
    problems = []
    for model in models:
        try:
            _rebind(model)
        except Exception as exc:  # noqa: BLE001 - reported: that model must be wrapped again
            problems.append(f"{type(model.module).__name__}: {type(exc).__name__}: {exc}")
    return problems


def _rebind(model: Any) -> None:
    hooks = list(model._comm_hooks)
    attrs = {k: v for k, v in model.__dict__.items() if k not in ("process_group", "reducer")}
    attrs.pop("logger", None)
    type(model).__setstate__(model, attrs)  # takes the default group, builds the reducer
    if hooks:
        # DDP runs one hook per model: the first one registered (later entries are hooks that
        # a registered hook hands buckets to; they keep working through it).
        hook, state = hooks[0]
        type(model).register_comm_hook(model, state, hook)
        model._comm_hooks[:] = hooks  # the list as it was (registering added to it)
