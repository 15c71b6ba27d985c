"""No flush of a Jupyter kernel's output streams before each fork of a group.

``multiprocessing`` flushes ``sys.stdout`` and ``sys.stderr`` before every fork, so that the
child does not inherit (and repeat) text still buffered. In a Jupyter kernel those are ipykernel's
streams, whose flush hands the work to the kernel's I/O thread and waits for it: two thread
hand-offs per stream, per rank (3-4 ms a fork on a busy 2-core machine, a tenth of a launch of 8
ranks, and more once the first ranks compete for the CPU). Those streams need no flush at a fork:
a forked worker replaces its streams at once and routes the kernel's stream objects it inherited
through its own (see ``worker/bootstrap.py``), so text buffered in them at the fork is never sent
from the child; in the kernel it stays in order, ahead of the ranks' lines, which go through the
same stream. So for the fork loop's length the streams are swapped for wrappers whose ``flush``
does nothing (writes go through); the wrapper names the stream it wraps as ``__wrapped__``, for
the child to find it. Other streams (a script's files) are flushed at each fork as usual.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


class _FlushedLater:
    """``stream`` with ``flush`` a no-op; everything else goes to ``stream``."""

    def __init__(self, stream: Any) -> None:
        self.__wrapped__ = stream

    def flush(self) -> None:
        pass

    def write(self, text: str) -> int:
        return self.__wrapped__.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)


def _hands_off_flushes(stream: Any) -> bool:
    """Whether flushing ``stream`` waits for another thread (ipykernel's streams)."""
    iostream = sys.modules.get("ipykernel.iostream")
    return iostream is not None and isinstance(stream, iostream.OutStream)


@contextlib.contextmanager
def unflushed_forks() -> Iterator[None]:
    """Within: a fork does not flush the kernel's streams (ipykernel's), which need no flush."""
    stdout, stderr = sys.stdout, sys.stderr
    if not (_hands_off_flushes(stdout) or _hands_off_flushes(stderr)):
        yield
        return
    sys.stdout, sys.stderr = _FlushedLater(stdout), _FlushedLater(stderr)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _FlushedLater):  # unless someone else swapped it meanwhile
            sys.stdout = stdout
        if isinstance(sys.stderr, _FlushedLater):
            sys.stderr = stderr
