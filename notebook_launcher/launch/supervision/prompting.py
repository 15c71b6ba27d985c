"""Answering the ranks' prompts (debuggers, ``input()``, ``getpass()``) from the supervising cell.

The cell that runs a launch or a session call asks the frontend for each line with the kernel's
own ``input()`` (an ipykernel ``input_request``), one prompt at a time. When several ranks wait,
the prompt says so, and two commands of the launcher's own choose where a line goes:

* ``rank N``: answer rank N's prompt next;
* ``ranks all CMD`` or ``ranks 0,2 CMD``: send ``CMD`` to each of those ranks that waits.

Where nobody can answer (the frontend takes no input, the launch runs in the background, a
script has no terminal) every prompt is answered with the reason, which the rank raises.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import getpass
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from ...protocol.prompts import (
    DEBUGGER,
    PASSWORD,
    InputReply,
    InputRequest,
    PromptAnswered,
    PromptShown,
    unavailable_message,
)
from ...protocol.status import RankStatus
from ..launchers import WorkerHandle
from ..processes.signals import cancel_raise, raise_in_thread
from .group import WorkerGroup

FOCUS_WAIT = 0.3  # seconds the rank just answered gets to ask again before another rank's turn
ASK_POLL = 0.2  # seconds between looks at the ranks while the cell waits for a line
_RANK = re.compile(r"\s*rank\s+(\d+)\s*$")
_RANKS = re.compile(r"\s*ranks\s+(all|\d+(?:\s*,\s*\d+)*)\s+(.*)$")
NO_INPUT = (
    "this frontend takes no input (it runs the notebook without a person at it, as nbval, "
    "nbconvert and papermill do)"
)
IN_BACKGROUND = (
    "the launch runs in the background and no cell waits on it (launch_in_background, the "
    "config panel)"
)
NO_TERMINAL = "standard input is not a terminal"


class PromptEnded(EOFError):
    """A prompt that is no longer wanted (a rank failed while it waited): its rank is told so."""


class PromptAbandoned(BaseException):
    """Raised in a cell waiting in ``input()`` for a prompt that ended unanswered (a
    BaseException: the kernel's ``input()`` takes any Exception for a bad message)."""


@contextlib.contextmanager
def ended_meanwhile(ending: Callable[[], str | None] | None) -> Iterator[None]:
    """While the launching cell waits in ``input()`` for a rank's prompt, a thread looks every
    :data:`ASK_POLL` seconds whether the prompt is still wanted (``ending``: the reason it is
    not, read from the ranks); if not, the wait ends with :class:`PromptEnded`. The cell's
    thread reads no pipe while it waits, and the looking thread is gone before it reads again."""
    if ending is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    cell = threading.get_ident()
    stop = threading.Event()
    lock = threading.Lock()
    found: list[str] = []

    def watch() -> None:
        while not stop.wait(ASK_POLL):
            why = ending()
            if why is not None:
                with lock:
                    if not stop.is_set():
                        found.append(why)
                        raise_in_thread(cell, PromptAbandoned)
                return

    watcher = threading.Thread(target=watch, name="notebook_launcher-prompt-watch", daemon=True)
    watcher.start()
    try:
        yield
    except PromptAbandoned:
        if not found:  # another's (a relay ending the prompt this cell answers)
            raise
        raise PromptEnded(found[0]) from None
    finally:
        while True:  # a raise asked for just as the line came is taken back (or caught here)
            try:
                with lock:
                    stop.set()
                    if found:
                        cancel_raise(cell)
                break
            except PromptAbandoned:
                continue
        watcher.join()


class Answerer:
    """Who answers the ranks' prompts: ``ask(prompt, password)`` returns the line typed;
    ``unavailable`` says why nobody can (then ``ask`` is never called)."""

    def __init__(
        self,
        ask: Callable[[str, bool], str] | None = None,
        unavailable: str | None = None,
    ) -> None:
        self._ask = ask
        self.unavailable = unavailable
        # Why the prompt asked now is no longer wanted (a rank failed), or None: looked at
        # while the answerer waits for its line; set by the Prompter (None: nothing to look at).
        self.ending: Callable[[], str | None] | None = None

    def ask(self, prompt: str, password: bool) -> str:
        """The line typed for ``prompt``; a frontend that turns out to take no input sets
        ``unavailable`` and raises :class:`EOFError`."""
        assert self._ask is not None
        try:
            with interrupts_raised(), ended_meanwhile(self.ending):
                return self._ask(prompt, password)
        except NotImplementedError:  # IPython's StdinNotImplementedError: allow_stdin is off
            self.unavailable = NO_INPUT
            raise EOFError from None

    def answered_elsewhere(self) -> str | None:
        """What the user must do for a prompt to be answered, when nobody answers it now and
        the cell that runs the launch is not the one that will (shown once per prompt)."""
        return None

    def about(self, rank: int, waits: str) -> None:
        """Who asks next: ``rank``, which ``waits`` ("is in the debugger", "waits for input")."""


# Who answers the prompts of a launch supervised in a background thread (a relay to the cell
# that waits on it), set in that thread; none: nobody can.
background_answerer: contextvars.ContextVar[Answerer | None] = contextvars.ContextVar(
    "background_answerer", default=None
)


def cell_answerer() -> Answerer:
    """The answerer of the code running now: the kernel's ``input()`` in the thread that runs a
    notebook cell (or in a terminal); in the thread of a launch supervised in the background,
    its relay to the cell that waits on it, if it has one; else nobody."""
    if threading.current_thread() is not threading.main_thread():
        return background_answerer.get() or Answerer(unavailable=IN_BACKGROUND)
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if getattr(shell, "kernel", None) is None and not _is_terminal(sys.stdin):
        return Answerer(unavailable=NO_TERMINAL)
    return Answerer(_read_line)


def cell_takes_input() -> bool:
    """Whether someone can answer a prompt asked now: the code runs in the thread of a notebook
    cell whose frontend takes input, or in a terminal."""
    if threading.current_thread() is not threading.main_thread():
        return False
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return _is_terminal(sys.stdin)
    return bool(getattr(kernel, "_allow_stdin", True))


def _read_line(prompt: str, password: bool) -> str:
    # Looked up at each call: a kernel installs its own input() and getpass() while a cell runs.
    return getpass.getpass(prompt) if password else builtins.input(prompt)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """An interrupt raises ``KeyboardInterrupt`` for the duration (the kernel's stdin request
    waits for it), whatever handler the supervision installed to defer it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Prompter:
    """Answers the prompts of a worker group's ranks, one line per :meth:`serve`.

    Args:
        group: the worker group (each handle's ``prompt`` is the request it waits on, if any;
            its sink shows the launcher's lines, its pump reads the ranks).
        answerer: who types the lines.
        before_ask: called just before each prompt (a tick: the views see the time), before
            :class:`PromptShown` tells them to draw.
    """

    def __init__(
        self,
        group: WorkerGroup,
        answerer: Answerer,
        before_ask: Callable[[], None] = lambda: None,
    ) -> None:
        self.group = group
        self.before_ask = before_ask
        self.handles = group.handles
        self.answerer = answerer
        answerer.ending = self._ending
        self.clock = group.clock
        self.focus: int | None = None  # the rank whose prompt comes first
        self._told: tuple[int, ...] = ()  # the waiting ranks the cell was last told of
        self._shown: set[int] = set()  # hidden ranks whose output the cell shows now
        self._answered: set[int] = set()  # the ranks the last line went to
        self._told_where: set[int] = set()  # the ranks whose prompt was said to wait elsewhere

    def write(self, text: str) -> None:
        self.group.sink.notice(text, "stdout")

    def drain(self) -> None:
        """Read what the ranks have sent already (a rank's output before its prompt)."""
        for _ in range(3):
            self.group.pump(0)

    def waiting(self) -> list[WorkerHandle]:
        return [h for h in self.handles if h.prompt is not None]

    def serve(self) -> None:
        """Answer one line: the focused rank's prompt if it waits (the ranks answered last
        get ``FOCUS_WAIT`` to ask again), else the lowest waiting rank's."""
        if not self.waiting():
            return
        if self.answerer.unavailable is not None:
            self._refuse_all()
            return
        self._await_answered()
        focus = self._focused()
        self.drain()
        waiting = self.waiting()
        if not waiting:
            return
        handle = focus if focus is not None and focus.prompt is not None else waiting[0]
        self.focus = handle.rank
        self._tell_others(handle, waiting)
        self._show_hidden(handle)
        # Every line the ranks printed before the prompt (where pdb stopped), even one still
        # held to be grouped with other ranks' alike lines.
        self.group.sink.flush(final=True)
        request: InputRequest = handle.prompt
        self.before_ask()
        self.group.publish(PromptShown(handle.rank))
        self._tell_where(handle, request)
        self.answerer.about(handle.rank, _waits(request))
        try:
            line = self.answerer.ask(request.label(), request.kind == PASSWORD)
        except PromptEnded as ended:
            if self.answerer.answered_elsewhere() is None:  # this cell asked: it says why it ended
                self.write(
                    f"notebook_launcher: rank {handle.rank}'s prompt closed unanswered: {ended}"
                )
            self._refuse_all(str(ended))
            return
        except EOFError:
            if self.answerer.unavailable is not None:
                self._refuse_all()
                return
            line = "EOF"  # pdb quits on it; interact and input() end their input
        if request.kind == DEBUGGER and self._command(line, waiting):
            return
        self._send(handle, InputReply(line))

    def _await_answered(self) -> None:
        """Give the ranks answered last ``FOCUS_WAIT`` to ask again (after ``p x`` or ``n``), so
        that the prompt stays with them rather than jumping to another rank that waits."""
        expected = [h for h in self.handles if h.rank in self._answered]
        end = self.clock() + FOCUS_WAIT
        while any(h.prompt is None and h.status.active for h in expected) and self.clock() < end:
            self.group.pump(min(0.05, max(0.0, end - self.clock())))
        self._answered = set()

    def _show_hidden(self, handle: WorkerHandle) -> None:
        """A rank whose output the cell does not show (``output="main"``): its lines from now on,
        and the two before its first prompt (where a debugger stopped)."""
        sink = self.group.sink
        if handle.rank in self._shown or sink.shows(handle.rank):
            return
        self._shown.add(handle.rank)
        sink.also_shown.add(handle.rank)
        for text in sink.tail(handle.rank)[-2:]:
            self.write(text)

    def _focused(self) -> WorkerHandle | None:
        for handle in self.handles:
            if handle.rank == self.focus:
                return handle
        return None

    def _tell_others(self, handle: WorkerHandle, waiting: list[WorkerHandle]) -> None:
        others = tuple(h.rank for h in waiting if h is not handle)
        if others and others != self._told:
            names = ", ".join(map(str, others))
            self.write(
                f"notebook_launcher: rank {names} also {'waits' if len(others) == 1 else 'wait'} "
                f"at a prompt; 'rank N' answers rank N next, 'ranks all CMD' or 'ranks 0,2 CMD' "
                "sends CMD to several"
            )
        self._told = others

    def _tell_where(self, handle: WorkerHandle, request: InputRequest) -> None:
        where = self.answerer.answered_elsewhere()
        if where is None or handle.rank in self._told_where:
            return
        self._told_where.add(handle.rank)
        self.write(f"notebook_launcher: rank {handle.rank} {_waits(request)}: {where}")

    def _ending(self) -> str | None:
        """Why the prompt asked now is no longer wanted: a rank failed, or the rank that asked
        left its prompt (it was killed). Reads what the ranks sent meanwhile."""
        self.group.pump(0)
        failed = [h.rank for h in self.group.with_status(RankStatus.FAILED)]
        if failed:
            return f"rank {', '.join(map(str, failed))} failed while the prompt waited"
        asking = self._focused()
        if asking is not None and asking.prompt is None:
            return f"rank {asking.rank} left its prompt"
        return None

    def _command(self, line: str, waiting: list[WorkerHandle]) -> bool:
        """Act on ``rank N`` / ``ranks ... CMD``; whether ``line`` was one of them."""
        match = _RANK.match(line)
        if match:
            rank = int(match[1])
            if any(h.rank == rank for h in waiting):
                self.focus = rank
            else:
                self.write(
                    f"notebook_launcher: rank {rank} is not at a prompt ({_listed(waiting)})"
                )
            return True
        match = _RANKS.match(line)
        if match:
            chosen = None if match[1] == "all" else {int(r) for r in match[1].split(",")}
            targets = [h for h in waiting if chosen is None or h.rank in chosen]
            missing = sorted((chosen or set()) - {h.rank for h in targets})
            if missing:
                self.write(
                    f"notebook_launcher: rank {', '.join(map(str, missing))} not at a prompt "
                    f"({_listed(waiting)}); nothing sent there"
                )
            for target in targets:
                self._send(target, InputReply(match[2]))
            return True
        return False

    def _send(self, handle: WorkerHandle, reply: InputReply) -> None:
        handle.prompt = None
        self._answered.add(handle.rank)
        self._told_where.discard(handle.rank)
        handle.answer(reply)
        self.group.publish(PromptAnswered(handle.rank))

    def _refuse_all(self, why: str | None = None) -> None:
        """Tell each waiting rank that nobody answers: ``why`` (or why nobody can)."""
        why = why or self.answerer.unavailable or ""
        for handle in self.waiting():
            request: InputRequest = handle.prompt
            self._send(
                handle, InputReply(error=unavailable_message(handle.rank, request.kind, why))
            )


def _waits(request: InputRequest) -> str:
    return "is in the debugger" if request.kind == DEBUGGER else "waits for input"


def _listed(waiting: list[WorkerHandle]) -> str:
    if not waiting:
        return "no rank waits at one"
    return f"waiting: rank {', '.join(str(h.rank) for h in waiting)}"
