"""The two ways a worker talks to the kernel: pickled events over one pipe, and raw output bytes
(file-descriptor level) over two more, which the reading side splits into lines."""

from __future__ import annotations

import threading
from typing import Any

from .events import OutputLine

READ_CHUNK = 1 << 16  # bytes read from an output pipe at a time
MAX_LINE_BYTES = 64 * 1024  # a line longer than this is shown in pieces rather than held forever


class EventChannel:
    """Thread-safe sender of events to the kernel over one pipe."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, event: object) -> None:
        with self._lock:
            self._conn.send(event)


class LineSplitter:
    """Turns the byte chunks of one stream of one rank into complete lines."""

    def __init__(self, rank: int, stream: str) -> None:
        self.rank = rank
        self.stream = stream
        self._pending = b""

    def feed(self, chunk: bytes) -> list[OutputLine]:
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        while len(self._pending) > MAX_LINE_BYTES:
            lines.append(self._pending[:MAX_LINE_BYTES])
            self._pending = self._pending[MAX_LINE_BYTES:]
        return [self._line(raw) for raw in lines]

    def close(self) -> list[OutputLine]:
        """The unterminated last line, if any (a rank that died mid-line)."""
        rest, self._pending = self._pending, b""
        return [self._line(rest)] if rest else []

    def _line(self, raw: bytes) -> OutputLine:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        # A carriage return redraws the line in a terminal (progress bars): keep what it would show.
        text = text.rsplit("\r", 1)[-1]
        return OutputLine(self.rank, self.stream, text)
