"""``%pdb on``: a launch or a session call that fails on a rank opens the debugger on that rank,
in the cell that runs it, instead of IPython's debugger in the launcher's frames."""

from __future__ import annotations

import sys
import threading
from typing import Any

from .prompting import cell_takes_input


def shell_wants_pdb() -> Any:
    """The IPython shell when it debugs every error (``%pdb on``) in the thread running a cell;
    None otherwise."""
    if threading.current_thread() is not threading.main_thread():
        return None
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if getattr(shell, "call_pdb", False) else None


def cell_debugs_failures() -> bool:
    """Whether a launch run now should stop a failing rank in the debugger before it reports:
    the cell has ``%pdb on`` and someone can answer the prompt (the frontend takes input, or a
    terminal runs IPython)."""
    return shell_wants_pdb() is not None and cell_takes_input()


def debugged_on_rank(shell: Any, error: BaseException) -> None:
    """Mark ``error`` as debugged on its rank already, so that ``shell`` does not open its own
    debugger on it (in the kernel's frames, where the rank's locals are not)."""
    try:
        error.debugged_on_rank = True  # type: ignore[attr-defined]
    except AttributeError:
        return
    original = shell.debugger
    if getattr(original, "skips_ranks", False):
        return

    def debugger(force: bool = False) -> Any:
        if getattr(getattr(sys, "last_value", None), "debugged_on_rank", False):
            return None
        return original(force)

    debugger.skips_ranks = True  # type: ignore[attr-defined]
    shell.debugger = debugger
