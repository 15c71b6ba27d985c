"""Widgets without a frontend: every comm message a widget sends is recorded for the test."""

from __future__ import annotations

import itertools

import pytest

_ids = itertools.count()


class RecordingComm:
    """Stands in for a kernel comm: keeps what each widget would send to the frontend."""

    kernel = "recording"  # widgets only send through a comm whose kernel is set

    log: list[tuple[str, dict]] = []

    def __init__(self, *args, **kwargs) -> None:
        self.comm_id = kwargs.get("comm_id") or f"comm-{next(_ids)}"
        self.opened = kwargs.get("data")
        self.closed = False

    def open(self, *args, **kwargs) -> None:
        pass

    def send(self, data=None, metadata=None, buffers=None) -> None:
        RecordingComm.log.append((self.comm_id, data))

    def on_msg(self, callback) -> None:
        pass

    def on_close(self, callback) -> None:
        pass

    def close(self, *args, **kwargs) -> None:
        self.closed = True


class Recorder:
    """What the widgets of a test sent: ``messages`` (comm id, data) in order."""

    @property
    def messages(self) -> list[tuple[str, dict]]:
        return RecordingComm.log

    def updates(self, widget) -> list[dict]:
        """The state updates sent for one widget."""
        return [
            data["state"]
            for comm_id, data in RecordingComm.log
            if comm_id == widget.model_id and data and data.get("method") == "update"
        ]

    def clear(self) -> None:
        RecordingComm.log.clear()


@pytest.fixture
def comms(monkeypatch) -> Recorder:
    """Route every widget's comm to a :class:`RecordingComm` (ipywidgets 7 and 8)."""
    import comm
    import ipywidgets.widgets.widget as widget_module

    RecordingComm.log = []
    # ipywidgets 8 and 7.8 create comms through the comm package, older 7.x through ipykernel's
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    if hasattr(widget_module, "Comm"):
        monkeypatch.setattr(widget_module, "Comm", RecordingComm)
    return Recorder()


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
