"""The communicator of this process's job, chosen once from its state's backend.

The public operations (``gather``, ``reduce`` ...) decide *what* to send; the backend's
:class:`~notebook_launcher.backends.comm.Communicator` knows *how* (see
:meth:`Backend.communicator <notebook_launcher.backends.base.Backend.communicator>`).
:func:`current` keeps it until the state is created again.
"""

from __future__ import annotations

from ..backends.comm import Communicator
from ..state.partial import PartialState
from ..utils.replicas import ReplicaLocal

_current = ReplicaLocal()  # per thread where XLA replicas are threads

__all__ = ["Communicator", "current"]


def current() -> Communicator:
    """The communicator of this process's job, creating the :class:`PartialState` if needed."""
    state = PartialState()
    comm = _current.get()
    if comm is not None and comm.is_current(state):
        return comm
    comm = state.device_backend.communicator(state)
    _current.set(comm)
    return comm
