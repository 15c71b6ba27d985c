"""Waiting on the workers' pipes and sentinels with one ``poll`` set kept from wait to wait.

``multiprocessing.connection.wait`` builds a new poll set and registers every descriptor on each
call: with 3 pipes and a sentinel per rank that is most of the cost of a wake-up of the kernel's
supervising loop (about 80 microseconds at 8 ranks). The set here is built again only when what
is waited on changes (a pipe reached its end, a process exited), and then only for what changed.
"""

from __future__ import annotations

import math
import select
from multiprocessing.connection import wait
from typing import Any


class Poller:
    """``wait(objects, timeout)`` as ``multiprocessing.connection.wait`` (connections, sockets
    and descriptors; the ready ones back, in the order given), keeping its poll set."""

    def __init__(self) -> None:
        self._objects: list[Any] = []
        self._by_fd: dict[int, Any] = {}
        self._order: dict[int, int] = {}
        self._poll: Any = None

    def wait(self, objects: list[Any], timeout: float | None) -> list[Any]:
        if not hasattr(select, "poll"):
            return wait(objects, timeout)
        if objects != self._objects or self._poll is None:
            self._register(objects)
        if not objects:
            return wait([], timeout)  # sleeps for the timeout, as wait() does
        milliseconds = None if timeout is None else max(0, math.ceil(timeout * 1e3))
        try:
            events = self._poll.poll(milliseconds)
        except InterruptedError:
            return []
        ready = [self._by_fd[fd] for fd, _ in events if fd in self._by_fd]
        if len(ready) > 1:
            ready.sort(key=lambda obj: self._order[id(obj)])
        return ready

    def _register(self, objects: list[Any]) -> None:
        if self._poll is None:
            self._poll = select.poll()
        wanted = {(obj if isinstance(obj, int) else obj.fileno()): obj for obj in objects}
        for fd, obj in list(self._by_fd.items()):
            if wanted.get(fd) is not obj:  # gone (or its number now names something else)
                self._poll.unregister(fd)
                del self._by_fd[fd]
        for fd, obj in wanted.items():
            if fd not in self._by_fd:
                self._poll.register(fd, select.POLLIN)
                self._by_fd[fd] = obj
        self._order = {id(obj): index for index, obj in enumerate(objects)}
        self._objects = list(objects)
