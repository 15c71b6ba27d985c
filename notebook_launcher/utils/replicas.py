"""Per-replica storage: one per process, or one per thread where replicas are threads.

On TPU v2/v3 (and with ``CPU_NUM_DEVICES=N`` on the CPU) ``xmp.spawn`` runs several replicas as
threads of one process. Each replica then needs its own singleton state (rank, device, process
group stand-ins); everywhere else the state is shared by every thread of the process, so a
helper thread sees what the main thread created.
"""

from __future__ import annotations

import threading
from typing import Any

_threads_are_replicas = False


def use_thread_replicas(enabled: bool = True) -> None:
    """Switch every :class:`ReplicaLocalDict` to one dict per thread (``enabled``) or per process.

    Raises:
        TypeError: ``enabled`` is not a bool.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled={enabled!r} is not valid: expected a bool")
    global _threads_are_replicas
    _threads_are_replicas = enabled


class ReplicaLocalDict:
    """A class attribute holding a dict: the process's, or the calling thread's for thread replicas.

    Used as ``_shared_state = ReplicaLocalDict()`` on the singleton state classes;
    ``cls._shared_state`` and ``self._shared_state`` return the dict of the current replica.
    """

    def __init__(self) -> None:
        self._process: dict[str, Any] = {}
        self._local = threading.local()

    def __get__(self, obj: Any, objtype: Any = None) -> dict[str, Any]:
        if not _threads_are_replicas:
            return self._process
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = {}
        return store


class ReplicaLocal:
    """One value per process, or per thread for thread replicas (``get``/``set``)."""

    def __init__(self, default: Any = None) -> None:
        self._default = default
        self._process = default
        self._local = threading.local()

    def get(self) -> Any:
        if _threads_are_replicas:
            return getattr(self._local, "value", self._default)
        return self._process

    def set(self, value: Any) -> None:
        if _threads_are_replicas:
            self._local.value = value
        else:
            self._process = value
