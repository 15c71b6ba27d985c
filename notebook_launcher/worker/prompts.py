"""A rank's standard input: debugger prompts, ``input()`` and ``getpass()`` answered in the cell.

A forked rank inherits what the kernel installed: debugpy's ``sys.breakpointhook`` (so
``breakpoint()`` does nothing), ipykernel's ``input``/``getpass`` and its ``_input_request`` (which
wait forever for a reply on a socket that is the kernel's), and its ``sys.stdin``. :func:`install`
replaces every one of them: a line a rank asks for goes to the kernel as an
:class:`~notebook_launcher.protocol.prompts.InputRequest` on the rank's event channel, and the rank
waits for the :class:`~notebook_launcher.protocol.prompts.InputReply` on its reply path.
``PYTHONBREAKPOINT`` and a ``sys.breakpointhook`` of the user's own are honoured.
"""

from __future__ import annotations

import bdb
import builtins
import getpass
import io
import os
import pdb
import re
import site
import sys
import sysconfig
import threading
from collections.abc import Callable
from typing import Any

from ..protocol.prompts import (
    DEBUGGER,
    INPUT,
    PASSWORD,
    DebuggerQuit,
    InputReply,
    InputRequest,
    StdinUnavailableError,
    quit_message,
    unavailable_message,
)
from ..utils.cells import code_name

# Modules whose breakpoint hooks a rank must not keep: the kernel's debugger, ipykernel's own,
# and pytest's (its debugger drives the test process's own output capture).
_KERNEL_HOOKS = ("debugpy", "_pydevd", "pydevd", "ipykernel", "_pytest", "ray")
# PYTHONBREAKPOINT values a rank must not keep: Ray sets its remote debugger there in the driver
# (the kernel, once it joined a cluster) and in every actor, whatever the user chose.
_FOREIGN_BREAKPOINTS = ("ray.util.",)
NO_REPLY_PATH = "this kind of rank has no way to reach the cell (XLA replicas take no input)"
# The code of the launcher's frames that call the user's code (filled by the worker's modules):
# a debugger's stack starts above the innermost of them.
ENTRY_CODES: set[Any] = set()
_ANSI = r"\x1b\[[0-9;]*m"  # a colour code of IPython's debugger
# Modules that read a debugger's commands through input().
_DEBUGGER_CALLERS = ("cmd", "code")


class RankPrompter:
    """Asks the kernel for one line at a time on behalf of rank ``rank``.

    Args:
        rank: the rank's global rank.
        send: sends an event to the kernel (the rank's event channel).
        receive: waits for the kernel's :class:`InputReply` (the rank's reply path); None
            where there is none: every request fails with :class:`StdinUnavailableError`.
        flush: writes out what the rank printed, so it reaches the cell before the prompt.
        unavailable: why nobody can answer, where ``receive`` is None.
    """

    def __init__(
        self,
        rank: int,
        send: Callable[[object], None],
        receive: Callable[[], InputReply] | None,
        flush: Callable[[], None],
        unavailable: str = NO_REPLY_PATH,
    ) -> None:
        self.rank = rank
        self._send = send
        self._receive = receive
        self._flush = flush
        self._unavailable = unavailable
        self._lock = threading.Lock()  # one question at a time, whichever thread asks

    def ask(self, prompt: str, kind: str) -> str:
        """The line the user typed for ``prompt`` (without its newline)."""
        if self._receive is None:
            raise StdinUnavailableError(unavailable_message(self.rank, kind, self._unavailable))
        with self._lock:
            self._flush()
            self._send(InputRequest(self.rank, str(prompt), kind))
            reply = self._receive()
        if reply.error is not None:
            raise StdinUnavailableError(reply.error)
        return reply.text


class RankStdin(io.TextIOBase):
    """``sys.stdin`` of a rank: each line read is asked of the cell."""

    def __init__(self, prompter: RankPrompter) -> None:
        super().__init__()
        self._prompter = prompter

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        return self._prompter.ask("", INPUT) + "\n"

    def read(self, size: int | None = -1) -> str:
        return self.readline()


def install(prompter: RankPrompter) -> None:
    """Replace everything of the kernel's standard input in this process (see the module)."""
    devnull = os.open(os.devnull, os.O_RDONLY)  # C-level reads of fd 0 end at once
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = sys.__stdin__ = RankStdin(prompter)

    def rank_input(prompt: object = "") -> str:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        kind = DEBUGGER if caller in _DEBUGGER_CALLERS else INPUT
        line = prompter.ask(str(prompt), kind)
        if caller == "code" and line.strip() == "EOF":  # pdb's interact ends on end of input
            raise EOFError
        return line

    def rank_getpass(prompt: str = "Password: ", stream: Any = None) -> str:
        return prompter.ask(prompt, PASSWORD)

    builtins.input = rank_input
    getpass.getpass = rank_getpass
    _forget_kernel_input(prompter)
    if os.environ.get("PYTHONBREAKPOINT", "").startswith(_FOREIGN_BREAKPOINTS):
        del os.environ["PYTHONBREAKPOINT"]
    if _from_kernel(sys.breakpointhook):
        sys.breakpointhook = sys.__breakpointhook__  # reads PYTHONBREAKPOINT at each call
    # IPython's kernel puts its own debugger in pdb's place: a rank gets pdb's own.
    pdb.Pdb = _plain_pdb(pdb.Pdb)  # type: ignore[misc]
    pdb.set_trace = _set_trace
    pdb.Pdb._cmdloop = _cmdloop  # type: ignore[method-assign]
    pdb.Pdb.format_stack_entry = _format_stack_entry  # type: ignore[method-assign]
    pdb.Pdb.get_stack = _get_stack  # type: ignore[method-assign]
    pdb.Pdb.stop_here = _stop_here  # type: ignore[method-assign]
    _adapt_ipython_debugger()  # loaded already in a forked rank; else when a debugger starts:
    if not hasattr(pdb.Pdb.__init__, "adapts"):
        pdb.Pdb.__init__ = _adapting(pdb.Pdb.__init__)  # type: ignore[method-assign]


def _adapt_ipython_debugger() -> None:
    """IPython's debugger (what ``ipdb.set_trace()`` runs) as pdb is here: it names a notebook
    cell as IPython names it, and lets an interrupt end the rank's code (its own command loop
    catches it and asks again). It reads its commands through ``input()`` already."""
    module = sys.modules.get("IPython.core.debugger")
    debugger = getattr(module, "Pdb", None)
    if debugger is None or getattr(debugger, "_rank_adapted", False):
        return
    own_format = debugger.format_stack_entry

    def format_stack_entry(self: Any, frame_lineno: tuple, lprefix: str = ": ") -> str:
        return _cell_named(self, own_format(self, frame_lineno, lprefix), frame_lineno)

    debugger.format_stack_entry = format_stack_entry
    debugger._cmdloop = _cmdloop
    debugger._rank_adapted = True


def _adapting(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (pdb's), adapting IPython's debugger first if it was loaded since."""

    def __init__(self: pdb.Pdb, *args: Any, **kwargs: Any) -> None:
        _adapt_ipython_debugger()
        init(self, *args, **kwargs)

    __init__.adapts = True  # type: ignore[attr-defined]
    return __init__


def _plain_pdb(current: type) -> type:
    """pdb's own ``Pdb`` class, where another debugger (IPython's) took its name."""
    for cls in current.__mro__:
        if cls.__module__ == "pdb" and cls.__name__ == "Pdb":
            return cls
    return current


def _set_trace(*, header: str | None = None) -> None:
    """``pdb.set_trace()``: pdb's debugger, in the caller's frame."""
    debugger = pdb.Pdb()
    if header is not None:
        debugger.message(header)
    debugger.set_trace(sys._getframe().f_back)


def _from_kernel(hook: Any) -> bool:
    """Whether a ``sys.breakpointhook`` is one the kernel's machinery installed."""
    module = getattr(hook, "__module__", None) or ""
    return hook is sys.__breakpointhook__ or module.split(".")[0] in _KERNEL_HOOKS


def _forget_kernel_input(prompter: RankPrompter) -> None:
    """A forked copy of ipykernel's kernel asks through this rank too (code that calls the
    kernel's ``raw_input``, ``getpass`` or ``_input_request`` directly)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return

    def request(prompt: str, ident: Any = None, parent: Any = None, password: bool = False) -> str:
        return prompter.ask(prompt, PASSWORD if password else INPUT)

    kernel._input_request = request
    kernel.raw_input = lambda prompt="": prompter.ask(prompt, INPUT)
    kernel.getpass = lambda prompt="", stream=None: prompter.ask(prompt, PASSWORD)


def _cmdloop(self: pdb.Pdb) -> None:
    """pdb's command loop without its catch of ``KeyboardInterrupt``: the kernel stops or
    interrupts a rank at a prompt with one, and it must end the rank's code, not the command."""
    try:
        self.allow_kbdint = True
        self.cmdloop()
        self.allow_kbdint = False
    except BaseException:
        sys.settrace(None)  # no stepping on in whatever runs next
        raise


_bdb_format = bdb.Bdb.format_stack_entry
_bdb_get_stack = bdb.Bdb.get_stack
_bdb_stop_here = bdb.Bdb.stop_here


def _get_stack(self: pdb.Pdb, f: Any, t: Any) -> tuple[list, int]:
    """The frames pdb shows (``w``, ``u``, ``d``): the user's, from the function or cell the
    rank runs; the launcher's below it (and a forked kernel's) are left out."""
    stack, index = _bdb_get_stack(self, f, t)
    entries = [i for i, (frame, _) in enumerate(stack) if frame.f_code in ENTRY_CODES]
    if not entries or entries[-1] + 1 >= len(stack):
        return stack, index
    cut = entries[-1] + 1
    return stack[cut:], max(0, index - cut)


def _stop_here(self: pdb.Pdb, frame: Any) -> bool:
    """Stepping never stops in the launcher's own code (after the user's function returns)."""
    if str(frame.f_globals.get("__name__", "")).startswith("notebook_launcher."):
        return False
    return _bdb_stop_here(self, frame)


def _format_stack_entry(self: pdb.Pdb, frame_lineno: tuple, lprefix: str = ": ") -> str:
    """pdb's line for a frame, a notebook cell named as IPython names it (``Cell In[7], line 4,
    in f()``)."""
    return _cell_named(self, _bdb_format(self, frame_lineno, lprefix), frame_lineno)


def _cell_named(debugger: Any, text: str, frame_lineno: tuple) -> str:
    """``text``, a debugger's line for a frame, its ``file(line)`` (coloured or not) written as
    IPython names a cell: ``Cell In[7], line 4, in ``."""
    frame, lineno = frame_lineno
    filename = debugger.canonic(frame.f_code.co_filename)
    name = code_name(filename)
    if name == filename:
        return text
    place = re.compile(re.escape(filename) + rf"(?:{_ANSI})*\((?:{_ANSI})*{lineno}(?:{_ANSI})*\)")
    return place.sub(lambda _: f"{name}, line {lineno}, in ", text, count=1)


def quit_error(exc: BaseException, rank: int) -> BaseException:
    """``exc`` as the kernel should see it: pdb's quit becomes :class:`DebuggerQuit`."""
    if isinstance(exc, bdb.BdbQuit):
        return DebuggerQuit(quit_message(rank)).with_traceback(exc.__traceback__)
    return exc


def post_mortem(traceback: Any, rank: int) -> None:
    """pdb on the frames where this rank's last call failed (``traceback``), with their locals.

    It opens in the innermost frame of the user's own code (a notebook cell, a file of theirs),
    not in a library's: an error raised inside torch (a shape mismatch in ``nn.Linear``) opens
    on the user's line that called it, ``model(x)``; ``d`` goes down into the library's frames.
    """
    if traceback is None:
        raise RuntimeError(
            f"rank {rank} keeps no failure to debug: its last call did not fail, or a call ran "
            "since"
        )
    debugger = pdb.Pdb()
    debugger.reset()
    setup = debugger.setup

    def setup_at_users_frame(frame: Any, tb: Any) -> Any:
        done = setup(frame, tb)
        users = [i for i, (f, _) in enumerate(debugger.stack) if not _in_library(f)]
        if users and users[-1] != debugger.curindex:
            debugger.curindex = users[-1]
            debugger.curframe = debugger.stack[users[-1]][0]
            debugger.curframe_locals = debugger.curframe.f_locals
        return done

    debugger.setup = setup_at_users_frame  # type: ignore[method-assign]
    debugger.interaction(None, traceback)


def _library_dirs() -> tuple[str, ...]:
    """The folders of code that is not the user's: Python's own, installed packages, this one."""
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _in_library(frame: Any) -> bool:
    filename = frame.f_code.co_filename
    if filename.startswith("<frozen"):
        return True
    if filename.startswith("<"):
        return False
    return os.path.realpath(filename).startswith(_library_dirs())
