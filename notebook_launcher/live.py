"""Metrics, progress and a status line from inside a worker, shown live in the launching notebook.

Example:
    >>> from notebook_launcher import log, progress, set_status
    >>> def train():
    ...     set_status("warming up")
    ...     for step in progress(range(1000), desc="train"):
    ...         loss = 1.0 / (step + 1)
    ...         log({"loss": loss}, step=step)

Every call only appends to a buffer in the worker (about a microsecond); a background thread sends
the buffer to the kernel about ten times a second, and the worker bootstrap sends what is left
before it reports the function's result or failure, so nothing logged before the function returns
is lost. Outside a launched worker (in the kernel, in a script, in a ``DataLoader`` worker a rank
forked) every call is a cheap no-op, and :func:`progress` still iterates.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .backends import Backend, backend_for
from .protocol.context import current_context
from .protocol.events import TrackingBatch
from .utils.validation import short_repr

SEND_EVERY = 0.1  # seconds between batches sent by the background thread
WAKE_AT = 4096  # buffered records that wake the background thread early
MAX_STATUS = 200  # characters of a status text kept
MAX_NAME = 100  # characters of a metric name allowed


class _Off:
    """Marks a process that must never send (a child forked by a worker)."""


_OFF = _Off()
_tracker: _Tracker | _Off | None = None
_start_lock = threading.Lock()


class _Tracker:
    """The buffer of one worker process and the thread that sends it to the kernel."""

    def __init__(self, rank: int, local_rank: int, channel: Any, backend: Backend) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.channel = channel
        self.backend = backend  # asked for the device memory the rank holds
        self.records: deque[tuple[Any, dict[str, float]]] = deque()
        self.progress: Progress | None = None
        self.status: str | None = None
        self.wake = threading.Event()
        self.closed = False
        self._sent_progress: tuple | None = None
        self._sent_status: str | None = None
        self._sent_memory: int | None = None
        self._send_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name="notebook_launcher-tracking", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self.closed:
            self.wake.wait(SEND_EVERY)
            self.wake.clear()
            try:
                self.send()
            except Exception:  # the kernel is gone: the worker is about to be killed anyway
                return

    def send(self) -> None:
        """Send everything buffered so far as one batch (nothing when nothing changed)."""
        with self._send_lock:
            batch = self._batch()
            if batch is not None:
                self.channel.send(batch)

    def close(self) -> None:
        """Send the rest and stop the background thread."""
        self.closed = True
        self.wake.set()
        self.send()

    def _batch(self) -> TrackingBatch | None:
        records = self.records
        metrics = tuple(records.popleft() for _ in range(len(records)))
        progress = None
        bar = self.progress
        if bar is not None:
            snapshot = bar.snapshot()
            key = (bar, *snapshot[:3], bar.closed)
            if key != self._sent_progress:  # moved, renamed, or just closed (final elapsed)
                progress, self._sent_progress = snapshot, key
        status = self.status
        if status == self._sent_status:
            status = None
        else:
            self._sent_status = status
        memory = self.backend.memory_allocated(self.local_rank)
        if memory == self._sent_memory:
            memory = None
        else:
            self._sent_memory = memory
        if not metrics and progress is None and status is None and memory is None:
            return None
        return TrackingBatch(self.rank, metrics, progress, status, memory)


def _start() -> _Tracker | _Off | None:
    """The tracker of this worker, created on first use; None outside a launched worker."""
    global _tracker
    context = current_context()
    if context is None or context.channel is None:
        return None  # not cached: a worker forked from this process may be launched later
    with _start_lock:
        if _tracker is None:
            _tracker = _Tracker(
                context.rank, context.local_rank, context.channel, backend_for(context.device)
            )
        return _tracker


def _active() -> _Tracker | None:
    """This worker's tracker (started on first use); None outside a worker or where it is off."""
    tracker = _tracker if _tracker is not None else _start()
    return tracker if isinstance(tracker, _Tracker) else None


def _forked_child() -> None:
    # A process a worker forks (DataLoader workers) shares the worker's pipe to the kernel; its
    # writes would corrupt the worker's messages, so it never sends.
    global _tracker
    if _tracker is not None or current_context() is not None:
        _tracker = _OFF


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def flush(stop: bool = True) -> None:
    """Send everything this worker logged so far; with ``stop``, stop tracking too.

    The worker bootstrap calls this before it reports the function's result or failure; a
    session's worker after each call, without stopping (the next call logs again).
    """
    global _tracker
    tracker = _tracker
    if isinstance(tracker, _Tracker):
        if stop:
            _tracker = _OFF
            tracker.close()
        else:
            tracker.send()


def _number(name: str, value: Any) -> float:
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"metrics[{name!r}]={value!r} is not valid: expected a number (int, float or a "
            "one-element tensor)"
        )
    detach = getattr(value, "detach", None)
    if callable(detach):  # a tensor: read its value, not its autograd graph
        value = detach()
    try:
        return float(value)  # one-element tensors and NumPy scalars convert themselves
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(
            f"metrics[{name!r}]={short_repr(value)} is not valid: expected a number (int, float or a "
            f"one-element tensor) ({exc})"
        ) from None


def log(metrics: Mapping[str, float], step: int | None = None) -> None:
    """Record metrics of this rank; the launching notebook charts them per rank and their mean.

    Args:
        metrics: metric names mapped to numbers (ints, floats, one-element tensors; a tensor is
            read with ``.item()`` now, which waits for a GPU).
        step: the training step the values belong to; None numbers each metric's values 0, 1, 2 ...
            in the order this rank logs them.

    Raises:
        TypeError: ``metrics`` is not a mapping of names to numbers, or ``step`` is not a number.

    Note:
        Non-blocking: the values are buffered and sent by a background thread. Outside a
        launched worker the call does nothing.
    """
    if type(metrics) is not dict and not isinstance(metrics, Mapping):
        raise TypeError(
            f"metrics={short_repr(metrics)} is not valid: expected a dict of metric names to numbers"
        )
    if step is not None and (type(step) is not int and not _is_step(step)):
        raise TypeError(f"step={short_repr(step)} is not valid: expected an int, a float or None")
    tracker = _tracker
    if tracker is None:
        tracker = _start()
    if tracker is None or tracker is _OFF:
        return
    values = {}
    for name, value in metrics.items():
        if type(name) is not str or len(name) > MAX_NAME:
            raise TypeError(
                f"metric name {short_repr(name)} is not valid: expected a str of at most "
                f"{MAX_NAME} characters"
            )
        kind = type(value)
        values[name] = value if kind is float or kind is int else _number(name, value)
    records = tracker.records  # type: ignore[union-attr]
    records.append((step, values))
    if len(records) >= WAKE_AT:
        tracker.wake.set()  # type: ignore[union-attr]


def _is_step(step: object) -> bool:
    return isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step)


def set_status(text: str) -> None:
    """Show a short status text (a phase such as ``"evaluating"``) in this rank's row.

    Args:
        text: the text; longer than 200 characters is cut. ``""`` clears it.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"text={short_repr(text)} is not valid: expected a str")
    tracker = _active()
    if tracker is not None:
        tracker.status = text[:MAX_STATUS]


class Progress:
    """A tqdm-like progress counter shown in the rank's row of the status panel.

    Iterate over it (``for batch in progress(loader)``) or call :meth:`update`. It prints nothing;
    the launching notebook shows it.

    Attributes:
        n: items done so far.
        total: items expected, or None when unknown.
        desc: the description shown beside the bar.
    """

    def __init__(
        self,
        iterable: Iterable | None = None,
        total: int | None = None,
        desc: str | None = None,
        rank_zero_only: bool = True,
    ) -> None:
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
            raise TypeError(f"total={short_repr(total)} is not valid: expected an int >= 0 or None")
        if total is not None and total < 0:
            raise ValueError(f"total={total!r} is not valid: expected an int >= 0 or None")
        if desc is not None and not isinstance(desc, str):
            raise TypeError(f"desc={short_repr(desc)} is not valid: expected a str or None")
        if not isinstance(rank_zero_only, bool):
            raise TypeError(f"rank_zero_only={rank_zero_only!r} is not valid: expected a bool")
        if iterable is not None and not isinstance(iterable, Iterable):
            raise TypeError(f"iterable={short_repr(iterable)} is not valid: expected an iterable")
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        self.iterable = iterable
        self.total = total
        self.desc = desc
        self.n = 0
        self.closed = False
        self._started = time.monotonic()
        self._ended: float | None = None
        tracker = _active()
        if tracker is not None and (not rank_zero_only or tracker.rank == 0):
            tracker.progress = self

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("this progress has no iterable: pass one, or call update() instead")
        try:
            for item in self.iterable:
                yield item
                self.n += 1
        finally:
            self.close()

    def __len__(self) -> int:
        if self.total is None:
            raise TypeError("this progress has no known total")
        return self.total

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items done."""
        self.n += n

    def set_description(self, desc: str | None) -> None:
        """Change the description shown beside the bar."""
        if desc is not None and not isinstance(desc, str):
            raise TypeError(f"desc={short_repr(desc)} is not valid: expected a str or None")
        self.desc = desc

    def close(self) -> None:
        """Mark the bar done; its final count is sent with the next batch."""
        if not self.closed:
            self._ended = time.monotonic()
            self.closed = True

    def snapshot(self) -> tuple[str | None, int, int | None, float]:
        """``(desc, n, total, elapsed seconds)``, as sent to the kernel."""
        end = self._ended if self._ended is not None else time.monotonic()
        return (self.desc, self.n, self.total, end - self._started)

    def __repr__(self) -> str:
        total = "?" if self.total is None else self.total
        return f"Progress({self.desc or ''!s}{': ' if self.desc else ''}{self.n}/{total})"


def show_progress(source: Any) -> None:
    """Show ``source`` (an object with ``snapshot()`` and ``closed``, as :class:`Progress`) in
    this rank's progress column, in place of any bar shown before; nothing outside a worker."""
    tracker = _active()
    if tracker is not None:
        tracker.progress = source


def shown_progress() -> Any:
    """What this rank's progress column shows now (a :class:`Progress` or another source given
    to :func:`show_progress`); None when nothing, or outside a worker."""
    tracker = _active()
    return tracker.progress if tracker is not None else None


def progress(
    iterable: Iterable | None = None,
    total: int | None = None,
    desc: str | None = None,
    rank_zero_only: bool = True,
) -> Progress:
    """Wrap an iterable (or count to ``total``) and show the progress in the status panel.

    Args:
        iterable: what to iterate over; None to count with :meth:`Progress.update`.
        total: how many items to expect; defaults to ``len(iterable)`` where it has one.
        desc: a short description shown beside the bar.
        rank_zero_only: True (default) shows only rank 0's progress, as the ranks usually move in
            step; False shows every rank's.

    Returns:
        A :class:`Progress` to iterate over or to update.

    Raises:
        TypeError, ValueError: a parameter of the wrong type or value, named in the message.
    """
    return Progress(iterable, total=total, desc=desc, rank_zero_only=rank_zero_only)
