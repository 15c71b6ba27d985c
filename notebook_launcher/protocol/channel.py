"""The two ways a worker talks to the kernel: pickled events over one pipe, and raw output bytes
(file-descriptor level) over two more, which the reading side splits into lines."""

from __future__ import annotations

import threading
from typing import Any

from .events import OutputLine

READ_CHUNK = 1 << 16  # bytes read from an output pipe at a time
MAX_LINE_BYTES = 64 * 1024  # a line longer than this is shown in pieces rather than held forever
# A worker sends its Python-level stdout and stderr through one pipe, in order: a record that
# starts with STDERR_TAG came from stderr; CONTINUED_TAG (after it, if both) marks a flushed
# piece of a line that is not finished yet. Untagged bytes are stdout; an unfinished stdout
# line is continued after the stderr record that cut it.
STDERR_TAG = "\x1e"
CONTINUED_TAG = "\x1d"
_STDERR = STDERR_TAG.encode()
_CONTINUED = CONTINUED_TAG.encode()


class EventChannel:
    """Thread-safe sender of events to the kernel over one pipe."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, event: object) -> None:
        with self._lock:
            self._conn.send(event)


class LineSplitter:
    """Turns the byte chunks of one pipe of one rank into complete lines.

    The pipe of a worker's fd 1 carries its stderr lines too, tagged (see :data:`STDERR_TAG`):
    those come out as ``stderr`` lines, in the order the rank wrote them.
    """

    def __init__(self, rank: int, stream: str) -> None:
        self.rank = rank
        self.stream = stream
        self._pending = b""
        self._pieces = {"stdout": b"", "stderr": b""}  # flushed pieces of unfinished lines

    def feed(self, chunk: bytes) -> list[OutputLine]:
        data = self._pending + chunk
        *records, self._pending = data.split(b"\n")
        if len(self._pending) > MAX_LINE_BYTES and b"\r" in self._pending:
            self._pending = self._pending[self._pending.rindex(b"\r") :]
        while len(self._pending) > MAX_LINE_BYTES:
            records.append(self._pending[:MAX_LINE_BYTES])
            self._pending = self._pending[MAX_LINE_BYTES:]
        lines = []
        for raw in records:
            line = self._record(raw)
            if line is not None:
                lines.append(line)
        return lines

    def close(self) -> list[OutputLine]:
        """The unfinished last lines, if any (a rank that died mid-line)."""
        rest, self._pending = self._pending, b""
        line = self._record(rest) if rest else None
        lines = [line] if line is not None else []
        for stream, piece in self._pieces.items():
            if piece:
                self._pieces[stream] = b""
                lines.append(self._line(piece, stream))
        return lines

    def _record(self, raw: bytes) -> OutputLine | None:
        stream = self.stream
        cut = raw.find(_STDERR, 1)
        if cut > 0 and not raw.startswith(_STDERR):  # a stdout line cut by a stderr record
            self._pieces[stream] += raw[:cut]
            raw = raw[cut:]
        if raw.startswith(_STDERR):
            stream, raw = "stderr", raw[1:]
        if raw.startswith(_CONTINUED):
            piece = self._pieces[stream] + raw[1:]
            if len(piece) > MAX_LINE_BYTES and b"\r" in piece:
                piece = piece[piece.rindex(b"\r") :]
            if len(piece) <= MAX_LINE_BYTES:
                self._pieces[stream] = piece
                return None
            self._pieces[stream], raw = b"", piece
        elif self._pieces[stream]:
            raw, self._pieces[stream] = self._pieces[stream] + raw, b""
        return self._line(raw, stream)

    def _line(self, raw: bytes, stream: str | None = None) -> OutputLine:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        # A carriage return redraws the line in a terminal (progress bars): keep what it would show.
        text = text.rsplit("\r", 1)[-1]
        return OutputLine(self.rank, stream or self.stream, text)
