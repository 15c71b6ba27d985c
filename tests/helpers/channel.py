"""A process posing as rank 0 of a launch: what its worker-side API sends is collected."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import notebook_launcher.live as tracking
from notebook_launcher.protocol.context import WorkerContext, set_context
from notebook_launcher.protocol.events import TrackingBatch


class Channel:
    """Collects what a worker would send to the kernel."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.lock = threading.Lock()

    def send(self, event: object) -> None:
        with self.lock:
            self.sent.append(event)

    def batches(self) -> list[TrackingBatch]:
        return [e for e in self.sent if isinstance(e, TrackingBatch)]

    def records(self) -> list:
        return [r for batch in self.batches() for r in batch.metrics]


def pose_as_worker(monkeypatch) -> Iterator[Channel]:
    """Make this process rank 0 of a launch until resumed (a fixture's body: ``yield from``)."""
    channel = Channel()
    context = WorkerContext(0, 0, 2, 2, 0, 1, "127.0.0.1", 0, "cpu", "no", 0, channel=channel)
    set_context(context)
    monkeypatch.setattr(tracking, "_tracker", None)
    yield channel
    tracking.flush()
    set_context(None)
    tracking._tracker = None
