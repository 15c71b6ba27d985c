"""A rank's ``sys.stdout`` and ``sys.stderr`` as one ordered pipe, each stderr record tagged."""

from __future__ import annotations

import io
import os
import threading
from typing import Any

from ..protocol.channel import CONTINUED_TAG, STDERR_TAG


class _Lines:
    """The writer behind a rank's stderr: its records go to fd 1 after what stdout holds
    (``before`` flushes it), so the kernel reads a rank's two streams in the order it wrote them.

    A record is one line of text ending in a newline, starting with :data:`STDERR_TAG` when it
    came from stderr and then :data:`CONTINUED_TAG` when it is a flushed piece of a line not
    finished yet (the kernel joins the pieces). A carriage return keeps only what a terminal
    would show, so a progress bar redrawn a thousand times costs one line. Each batch of records
    is one ``os.write``: lines of threads and of forked children are never cut into each other
    (up to the pipe's atomic size).
    """

    def __init__(self, fd: int, before: Any = None) -> None:
        self.fd = fd
        self.before = before  # flushes what another stream holds for the same fd
        self.lock = threading.RLock()  # a signal handler may print while the main thread writes
        self.partial = {"stdout": "", "stderr": ""}

    def write(self, stream: str, text: str) -> None:
        with self.lock:
            partial = self.partial[stream]
            if "\n" not in text:  # print() writes its text, then the newline
                rest = partial + text
                if "\r" in text:
                    rest = _as_shown(rest)
                self.partial[stream] = rest
                return
            lines, _, rest = (partial + text).rpartition("\n")
            if "\r" in rest:
                rest = _as_shown(rest)
            self.partial[stream] = rest
            self._send(stream, lines, continued=False)

    def flush(self, stream: str) -> None:
        """Send the unfinished line as it stands, marked as continued."""
        with self.lock:
            rest, self.partial[stream] = self.partial[stream], ""
            if rest:
                self._send(stream, rest, continued=True)

    def _send(self, stream: str, lines: str, continued: bool) -> None:
        """Send ``lines`` (joined by newlines), each tagged as ``stream`` and ``continued`` say."""
        if self.before is not None:
            try:
                self.before()
            except (OSError, ValueError):
                pass
        tag = (STDERR_TAG if stream == "stderr" else "") + (CONTINUED_TAG if continued else "")
        if tag:
            lines = tag + lines.replace("\n", "\n" + tag)
        raw = (lines + "\n").encode("utf-8", errors="backslashreplace")
        while raw:
            try:
                raw = raw[os.write(self.fd, raw) :]
            except InterruptedError:
                continue
            except OSError:  # the kernel is gone: nothing to show the lines to
                return


def _as_shown(rest: str) -> str:
    """An unfinished line with carriage returns as a terminal shows it, the return kept for the
    kernel to see."""
    shown = next((part for part in reversed(rest.split("\r")) if part), "")
    return "\r" + shown + ("\r" if rest.endswith("\r") else "")


class OrderedStream(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` of a rank: text goes through the shared line writer;
    ``fileno()`` is the stream's own fd (C-level writes and faulthandler use it directly)."""

    def __init__(self, lines: _Lines, name: str, fd: int) -> None:
        super().__init__()
        self._lines = lines
        self._name = name
        self._fd = fd
        self.buffer = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115

    @property
    def encoding(self) -> str:
        return "utf-8"

    @property
    def errors(self) -> str:
        return "backslashreplace"

    @property
    def name(self) -> str:
        return f"<{self._name}>"

    @property
    def line_buffering(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._lines.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        self._lines.flush(self._name)

    def close(self) -> None:  # sys.stdout.close() in user code must not close fd 1
        self.flush()


def ordered_streams(fd: int = 1) -> tuple[io.TextIOWrapper, OrderedStream]:
    """New ``sys.stdout`` and ``sys.stderr`` writing whole, ordered lines to ``fd``.

    stdout is a plain line-buffered text stream (print's fast path); stderr writes its records
    through the same fd after flushing what stdout holds, so the kernel reads both in order (a
    stdout line cut by a stderr record is joined again there).
    """
    stdout = open(  # noqa: SIM115
        fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    return stdout, OrderedStream(_Lines(fd, before=stdout.flush), "stderr", 2)
