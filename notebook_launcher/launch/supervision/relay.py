"""The prompts of a launch supervised in the background, answered by a cell that waits on it.

The supervising thread cannot ask the frontend itself: no cell runs it. When a rank stops at a
prompt it hands the prompt to a :class:`Relay` and waits (the limits of the run stand still
meanwhile, as at any prompt); the live panel says so. The next cell that waits on the launch
(``LaunchHandle.wait()``) takes the prompt, asks it with the kernel's own ``input()``, shows the
rank's output since the last prompt, and hands the line back.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from ...protocol.events import OutputLine
from .prompting import Answerer

ASK_POLL = 0.2  # seconds between looks at the stop request while a prompt waits for its cell
WAIT_TO_ANSWER = "call handle.wait() in a cell to answer"
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
        self._shown: deque[str] = deque(maxlen=SHOWN_LINES)  # lines the waiting cell did not show
        self._waiting_cell = False

    # -- the supervising thread -------------------------------------------------------------------

    def ask(self, prompt: str, password: bool) -> str:
        """Wait until a cell answers ``prompt`` (or the launch is stopped: :class:`EOFError`)."""
        with self._changed:
            self._asked, self._answer = (prompt, password), None
            self._asking += 1
            self._changed.notify_all()
            while self._answer is None and self.unavailable is None:
                if self._stop.is_set():
                    self.unavailable = "the launch was stopped while the prompt waited"
                    break
                self._changed.wait(ASK_POLL)
            answer, self._asked, self._answer = self._answer, None, None
        if answer is None:
            raise EOFError
        return answer

    def answered_elsewhere(self) -> str | None:
        with self._changed:
            return None if self._waiting_cell else WAIT_TO_ANSWER

    def __call__(self, event: object) -> None:
        """A listener of the run: the ranks' lines, for the cell that answers."""
        if isinstance(event, OutputLine):
            with self._changed:
                self._shown.append(f"[rank{event.rank}] {event.text}")

    # -- the waiting cell's thread ----------------------------------------------------------------

    def serve(self, answerer: Answerer, done: threading.Event, timeout: float | None) -> None:
        """Answer the run's prompts with ``answerer`` (the waiting cell's) until ``done`` is set
        or ``timeout`` seconds passed; an interrupt leaves the prompt for the next cell. Before
        each prompt the cell shows the ranks' lines since the last answer (where pdb stopped,
        what the last command printed)."""
        end = None if timeout is None else time.monotonic() + timeout
        answered = -1  # the prompt this cell answered last: never asked twice
        with self._changed:
            self._waiting_cell = True
        try:
            while not done.is_set() and (end is None or time.monotonic() < end):
                with self._changed:
                    asked, number = self._asked, self._asking
                    if asked is None or number == answered:
                        left = ASK_POLL if end is None else end - time.monotonic()
                        self._changed.wait(max(0.0, min(ASK_POLL, left)))
                        continue
                    shown = list(self._shown)
                    self._shown.clear()
                for line in shown:
                    print(line, flush=True)
                self._answer_with(answerer, *asked, number)
                answered = number
        finally:
            with self._changed:
                self._waiting_cell = False

    def _answer_with(self, answerer: Answerer, prompt: str, password: bool, number: int) -> None:
        try:
            line = answerer.ask(prompt, password)
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
