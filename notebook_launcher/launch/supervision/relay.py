"""The prompts of a launch supervised in the background, answered by a cell that waits on it.

The supervising thread cannot ask the frontend itself: no cell runs it. When a rank stops at a
prompt it hands the prompt to a :class:`Relay` and waits (the limits of the run stand still
meanwhile, as at any prompt); the live panel says so. The next cell that waits on the launch
(``LaunchHandle.wait()``) takes the prompt, asks it with the kernel's own ``input()``, and hands
the line back.

The ranks' lines reach the kernel through the relay's streams. While no cell answers they go
where the launch shows them (under its panel); once a cell takes a prompt, they go to that cell
only, until it returns: the lines since the last answer (where pdb stopped) move from the panel
to the cell, and the panel keeps one line that says where the prompt is answered. Every line
stays in ``result.output(rank)``.

A prompt that ends unanswered while the cell waits in ``input()`` (the launch is stopped, a rank
failed) takes the cell out of ``input()`` at once: the cell then reports the launch's outcome.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any

from ..processes.signals import cancel_raise, raise_in_thread
from .prompting import ASK_POLL, Answerer, PromptAbandoned, PromptEnded

WAIT_TO_ANSWER = "call handle.wait() in a cell to answer"
ANSWERED_THERE = (
    "answered in the cell that called handle.wait(), which shows the ranks' lines until it returns"
)
SHOWN_LINES = 50  # the ranks' last lines before a prompt that the answering cell shows


class Relay(Answerer):
    """An :class:`Answerer` for the supervising thread whose lines come from another thread.

    Args:
        stop: set when the launch is stopped: a prompt still waiting then ends (the rank is
            told that nobody answered).
    """

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self._stop = stop
        self._changed = threading.Condition()
        self._asked: tuple[str, bool] | None = None
        self._asking = 0  # the number of the prompt asked (an answer is for one prompt only)
        self._answer: str | None = None
        self._who = (-1, "")  # who asks: the rank, and "is in the debugger" or "waits for input"
        self._panel: Any = None  # where the launch shows its lines (None: the kernel's stdout)
        self._context: deque[str] = deque(maxlen=SHOWN_LINES)  # panel lines since the last take
        self._waiting_cell: int | None = None  # the thread of the cell that waits, if one does
        self._taken = False  # that cell took a prompt: the lines go there
        self._for_cell: list[str] = []  # lines the cell has yet to show
        self._for_panel: list[str] = []  # notes the supervising thread has yet to write
        self._retract = 0  # lines the panel takes back (they moved to the cell)
        self._inputting = False  # the cell waits in input()
        self._abandoning = False  # ... and was told to stop waiting
        self._closed: str | None = None  # why the last prompt ended unanswered

    def streams(self, panel: tuple[Any, Any] | None) -> tuple[RelayStream, RelayStream]:
        """The launch's stdout and stderr for its lines, in place of ``panel`` (None: the
        kernel's streams)."""
        out, err = panel or (None, None)
        self._panel = out
        return RelayStream(self, out, "stdout"), RelayStream(self, err, "stderr")

    # -- the supervising thread -------------------------------------------------------------------

    def ask(self, prompt: str, password: bool) -> str:
        """Wait until a cell answers ``prompt``; :class:`EOFError` if the launch is stopped
        meanwhile, :class:`PromptEnded` if the prompt is no longer wanted (a rank failed)."""
        with self._changed:
            self._asked, self._answer = (prompt, password), None
            self._asking += 1
            self._changed.notify_all()
        ended = None
        try:
            while ended is None:
                with self._changed:
                    self._write_notes()
                    if self._answer is not None or self.unavailable is not None:
                        break
                    if self._stop.is_set():
                        self.unavailable = "the launch was stopped while the prompt waited"
                        break
                    self._changed.wait(ASK_POLL)
                ended = self.ending() if self.ending else None  # reads the ranks: unlocked
        finally:  # whatever ends the wait, a cell in input() for this prompt stops waiting
            with self._changed:
                answer, self._asked, self._answer = self._answer, None, None
                if answer is None:
                    self._closed = ended or self.unavailable or "the launch ended"
                    self._abandon()
                self._write_notes()
        if answer is not None:
            return answer
        if ended is not None and self.unavailable is None:
            raise PromptEnded(ended)
        raise EOFError

    def wake(self) -> None:
        """The launch was stopped or ended: whoever waits on the relay looks again now."""
        with self._changed:
            self._changed.notify_all()

    def about(self, rank: int, waits: str) -> None:
        with self._changed:
            self._who = (rank, waits)

    def answered_elsewhere(self) -> str | None:
        with self._changed:
            return None if self._waiting_cell is not None else WAIT_TO_ANSWER

    def write(self, stream: RelayStream, text: str) -> None:
        """The launch's lines: to the cell that answers, else where the launch shows them."""
        with self._changed:
            self._write_notes()
            if self._taken:
                self._for_cell.extend(text.splitlines())
                self._changed.notify_all()
                return
            self._context.extend(text.splitlines())
            target = stream.passes_to
            target.write(text)
            target.flush()

    def _write_notes(self) -> None:
        """What the waiting cell did to the panel: lines taken back, notes (under the lock)."""
        panel = self._panel if self._panel is not None else sys.stdout
        if self._retract:
            retract = getattr(panel, "retract", None)
            if retract is not None:
                retract(self._retract)
            self._retract = 0
        if self._for_panel:
            panel.write("".join(note + "\n" for note in self._for_panel))
            panel.flush()
            self._for_panel.clear()

    def _abandon(self) -> None:
        """The prompt ended unanswered: a cell waiting in ``input()`` for it stops (under the
        lock)."""
        if self._inputting and self._waiting_cell is not None and not self._abandoning:
            self._abandoning = raise_in_thread(self._waiting_cell, PromptAbandoned)

    def _note(self, text: str) -> str:
        rank, waits = self._who
        return f"notebook_launcher: rank {rank} {waits}: {text}"

    # -- the waiting cell's thread ----------------------------------------------------------------

    def serve(self, answerer: Answerer, done: threading.Event, timeout: float | None) -> None:
        """Answer the run's prompts with ``answerer`` (the waiting cell's) until ``done`` is set
        or ``timeout`` seconds passed; an interrupt leaves the prompt for the next cell. Once
        the cell takes a prompt it shows the ranks' lines: those since the last answer first
        (where pdb stopped), then each as it comes, until it returns."""
        end = None if timeout is None else time.monotonic() + timeout
        answered = -1  # the prompt this cell answered last: never asked twice
        with self._changed:
            self._waiting_cell = threading.get_ident()
        try:
            while not done.is_set() and (end is None or time.monotonic() < end):
                with self._changed:
                    lines, self._for_cell = self._for_cell, []
                    asked, number = self._asked, self._asking
                    ready = asked is not None and number != answered
                    if ready and not self._taken:
                        lines = self._take()
                    if not ready and not lines:
                        left = ASK_POLL if end is None else end - time.monotonic()
                        self._changed.wait(max(0.0, min(ASK_POLL, left)))
                        continue
                _show(lines)
                if ready:
                    assert asked is not None
                    self._answer_with(answerer, *asked, number)
                    answered = number
        finally:
            with self._changed:
                self._waiting_cell = None
                lines, self._for_cell = self._for_cell, []
                if self._taken:
                    self._taken = False
                    if self._asked is not None:  # left for the next cell that waits
                        self._for_panel.append(self._note(WAIT_TO_ANSWER))
                        self._changed.notify_all()  # the supervising thread writes it now
            _show(lines)

    def _take(self) -> list[str]:
        """This cell answers from now on: the lines since the last take move from the panel to
        it, and the panel says where the prompt is answered (under the lock)."""
        self._taken = True
        lines = [line for line in self._context if not line.endswith(WAIT_TO_ANSWER)]
        self._retract = len(self._context)
        self._context.clear()
        self._for_panel.append(self._note(ANSWERED_THERE))
        self._changed.notify_all()
        return lines

    def _answer_with(self, answerer: Answerer, prompt: str, password: bool, number: int) -> None:
        try:
            try:
                with self._changed:
                    self._inputting = True
                line = answerer.ask(prompt, password)
            finally:
                self._input_ended()
        except PromptAbandoned:  # the prompt ended unanswered: the launch ends
            with self._changed:
                rank, why = self._who[0], self._closed
            print(f"notebook_launcher: rank {rank}'s prompt closed unanswered: {why}", flush=True)
            return
        except EOFError:
            if answerer.unavailable is None:
                line = "EOF"  # pdb quits on it, as at a prompt in the launching cell
            else:
                with self._changed:
                    self.unavailable = answerer.unavailable
                    self._changed.notify_all()
                return
        with self._changed:
            if self._asking == number and self._asked is not None:
                self._answer = line
            self._changed.notify_all()

    def _input_ended(self) -> None:
        """The cell is out of ``input()``: an abandon still pending is taken back (one that
        lands meanwhile is caught here)."""
        while True:
            try:
                with self._changed:
                    self._inputting = False
                    if self._abandoning:
                        self._abandoning = False
                        cancel_raise(threading.get_ident())
                return
            except PromptAbandoned:
                continue


class RelayStream:
    """One of the launch's output streams, passed through its :class:`Relay` (a file-like
    object for the output sink)."""

    def __init__(self, relay: Relay, target: Any, name: str) -> None:
        self._relay = relay
        self._target = target
        self._name = name

    @property
    def passes_to(self) -> Any:
        """Where the lines go while no cell answers."""
        if self._target is not None:
            return self._target
        return sys.stdout if self._name == "stdout" else sys.stderr

    def write(self, text: str) -> int:
        self._relay.write(self, text)
        return len(text)

    def flush(self) -> None:
        pass


def _show(lines: list[str]) -> None:
    if lines:
        print("\n".join(lines), flush=True)
