"""A rank asking the cell for a line (a debugger prompt, ``input()``, ``getpass()``) and the answer."""

from __future__ import annotations

from dataclasses import dataclass

DEBUGGER, INPUT, PASSWORD = "debugger", "input", "password"  # what a rank's prompt is for

# The prompts of the debuggers a rank may run, and how the cell shows them for rank N.
_DEBUGGER_PROMPTS = {"(Pdb) ": "(Pdb rank {rank}) ", "ipdb> ": "ipdb rank {rank}> "}


@dataclass(frozen=True)
class InputRequest:
    """Rank ``rank`` waits for one line: ``prompt`` as its code asked it, ``kind`` one of
    ``"debugger"`` (pdb, ipdb, ``interact``), ``"input"`` or ``"password"``."""

    rank: int
    prompt: str
    kind: str = INPUT

    def label(self) -> str:
        """The prompt as the cell shows it: the debugger's own, naming the rank (``(Pdb rank 1)
        ``), or the rank's prompt after ``[rank N]``."""
        known = _DEBUGGER_PROMPTS.get(self.prompt)
        if known is not None:
            return known.format(rank=self.rank)
        return f"[rank {self.rank}] {self.prompt}"


@dataclass(frozen=True)
class PromptShown:
    """The cell is about to wait for the answer to rank ``rank``'s prompt (made in the kernel,
    for views): nothing runs in the cell's thread until it is answered, so a view draws now what
    it would otherwise draw at its next turn."""

    rank: int


@dataclass(frozen=True)
class PromptAnswered:
    """The kernel sent rank ``rank`` the answer to its prompt (made in the kernel, for views)."""

    rank: int


@dataclass(frozen=True)
class InputReply:
    """The cell's answer to an :class:`InputRequest`: the line typed (without its newline), or
    ``error``, the reason nobody can answer (the rank raises :class:`StdinUnavailableError`)."""

    text: str = ""
    error: str | None = None


class StdinUnavailableError(RuntimeError):
    """A rank asked for input (a breakpoint, ``input()``, ``getpass()``) where nobody can answer:
    a frontend that takes no input, a launch in the background, a script without a terminal."""


class DebuggerQuit(Exception):
    """The user quit the debugger on a rank (pdb's ``q``): the launch or call ends on every rank."""


def quit_message(rank: int) -> str:
    return f"you quit the debugger on rank {rank}"


def unavailable_message(rank: int, kind: str, why: str) -> str:
    """What a rank that asked for input raises where nobody can answer, and how to debug instead."""
    asked = {
        DEBUGGER: "entered the debugger (breakpoint(), pdb.set_trace())",
        INPUT: "called input()",
        PASSWORD: "called getpass()",
    }[kind]
    advice = (
        "Run the cell in JupyterLab, Notebook, VS Code or Colab (they answer prompts), in a cell "
        "that waits for the launch; or set PYTHONBREAKPOINT=0 to skip breakpoint() calls; or "
        "print what you need instead."
        if kind == DEBUGGER
        else "Pass the value to the function instead of asking for it on the rank."
    )
    return f"rank {rank} {asked}, but nobody can answer: {why}. {advice}"
