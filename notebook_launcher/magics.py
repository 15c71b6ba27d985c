"""IPython magics for sessions: ``%load_ext notebook_launcher``, then

* ``%%distributed [-n N] [--timeout S] [--cluster ray|slurm] [--ranks 0,2]``: run the cell's body
  on every rank of the session, or on the ``--ranks`` given (one of N processes is started if none
  is open; ``--cluster ray``: each in a Ray actor on a Ray cluster; ``--cluster slurm``: each a
  task of a Slurm job step), in each rank's own namespace; the cell's value is the list of those
  ranks' last expressions (nothing when the body ends in a statement).
* ``%distributed status``, ``%distributed restart``, ``%distributed close``.
* ``%distributed push NAME [NAME ...]``: bind the kernel's values of those names on every rank.
* ``%distributed pull NAME``: every rank's value of NAME, as a list.
* ``%distributed start [-n N] [--cluster ray|slurm]``: start a session without running anything.
* ``%debug`` after a session call failed on a rank: the debugger on that rank, where it failed.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from typing import Any

from .launch.errors import shown_as_argument_errors
from .launch.launchers.clusters import check_cluster
from .launch.session.core import Session
from .utils.validation import check_int, check_number


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%distributed`` and ``%%distributed`` (``%load_ext notebook_launcher``), and
    ``%debug`` that reaches a session's rank after a call failed there."""
    ipython.register_magic_function(_line_or_cell(ipython), "line_cell", "distributed")
    original = ipython.find_line_magic("debug")
    if original is not None and not getattr(original, "reaches_ranks", False):
        ipython.register_magic_function(_debug(original), "line", "debug")


def _debug(original: Callable[[str], Any]) -> Callable[[str], Any]:
    def debug(line: str = "") -> Any:
        """``%debug`` after a session call failed on a rank: the debugger opens on that rank,
        in the frame where it failed, with its locals. After any other error, IPython's own."""
        failure = getattr(getattr(sys, "last_value", None), "launch_failure", None)
        failure = failure or getattr(getattr(sys, "last_value", None), "failure", None)
        session = Session.current()
        if (
            not line.strip()
            and getattr(failure, "call", None) is not None
            and session is not None
            and session.failed_rank == failure.rank
        ):
            return session.debug(failure.rank)
        return original(line)

    debug.reaches_ranks = True  # type: ignore[attr-defined]
    debug.__doc__ = original.__doc__
    return debug


def _line_or_cell(ipython: Any):
    def distributed(line: str, cell: str | None = None) -> Any:
        with shown_as_argument_errors():  # a refused input: its message, not the magic's frames
            call = _line(ipython, line) if cell is None else _cell(ipython, line, cell)
        return call()  # what runs on the ranks raises as a call of the session would

    distributed.__doc__ = __doc__
    return distributed


def _options(words: list[str], allowed: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """``-n N`` and ``--timeout S`` out of ``words``; the words left."""
    options: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name = _OPTION_NAMES.get(word, word)
        if word.startswith("-"):
            if name not in allowed:
                raise ValueError(
                    f"%distributed does not take {word!r} here; it takes "
                    + (", ".join(_FLAGS[a] for a in allowed) or "no options")
                )
            if i + 1 >= len(words):
                raise ValueError(f"{word} needs a value")
            value = words[i + 1]
            if name == "ranks":
                options[name] = _ranks(value)
            else:
                options[name] = value if name == "cluster" else _number(name, value)
            i += 2
            continue
        rest.append(word)
        i += 1
    return options, rest


_FLAGS = {
    "num_processes": "-n N",
    "timeout": "--timeout SECONDS",
    "cluster": "--cluster ray|slurm",
    "ranks": "--ranks 0,2",
}
_SUBCOMMANDS = ("status", "start", "restart", "close", "push", "pull")
_OPTION_NAMES = {
    "-n": "num_processes",
    "--num-processes": "num_processes",
    "--timeout": "timeout",
    "--cluster": "cluster",
    "--ranks": "ranks",
}


def _ranks(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(
            f"--ranks: {text!r} is not a list of ranks; write them with commas, e.g. --ranks 0,2"
        ) from None


def _number(name: str, text: str) -> Any:
    try:
        value = int(text) if name == "num_processes" else float(text)
    except ValueError:
        raise ValueError(f"{_FLAGS[name]}: {text!r} is not a number") from None
    if name == "num_processes":
        return check_int("num_processes", value, 1)
    return check_number("timeout", value, positive=True)


def _session(num_processes: int | None, cluster: str | None = None) -> Callable[[], Session]:
    """Check ``-n`` and ``--cluster`` against the open session; what returns that session, or
    starts one."""
    wanted = check_cluster(cluster)
    session = Session.current()
    if session is not None:
        if num_processes is not None and num_processes != session.num_processes:
            raise ValueError(
                f"-n {num_processes}: the open session has {session.num_processes} processes; "
                "`%distributed close` first to start one of another size"
            )
        if cluster is not None and wanted != session.settings.cluster:
            raise ValueError(
                f"--cluster {cluster}: the open session runs elsewhere; `%distributed close` "
                "first to start one there"
            )
        return lambda: session
    if num_processes is None:
        raise ValueError(
            "no session is open: give the number of processes, e.g. `%%distributed -n 2`"
        )
    return lambda: Session(num_processes=num_processes, cluster=wanted)


def _cell(ipython: Any, line: str, cell: str) -> Callable[[], Any]:
    """Check the cell magic's options; what runs the body on every rank."""
    options, rest = _options(shlex.split(line), ("num_processes", "timeout", "cluster", "ranks"))
    if rest:
        raise ValueError(
            "%%distributed takes only -n N, --timeout SECONDS, --cluster ray|slurm and --ranks 0,2, "
            f"not {rest!r}"
        )
    opened = _session(options.get("num_processes"), options.get("cluster"))
    # The body starts on the cell's second line; named as IPython names the cell, so that
    # tracebacks say "Cell In[7], line 3".
    source = "\n" + cell
    filename = ipython.compile.cache(source, _cell_number(ipython))

    def run() -> Any:
        ranks = options.get("ranks")
        result = opened().exec(
            source, timeout=options.get("timeout"), filename=filename, ranks=ranks
        )
        values = result.values if ranks is None else [result.values[r] for r in ranks]
        return None if all(v is None for v in values) else values

    return run


def _cell_number(ipython: Any) -> int:
    """The number IPython gave the running cell (its ``In[N]``): the one it filed the code of
    the frame calling the magic under (``execution_count`` may already count the next cell)."""
    numbers = getattr(ipython.compile, "_filename_map", {})
    frame = sys._getframe(1)
    while frame is not None:
        number = numbers.get(frame.f_code.co_filename)
        if number is not None:
            return number
        frame = frame.f_back
    return ipython.execution_count


def _line(ipython: Any, line: str) -> Callable[[], Any]:
    """Check the line magic's words; what does what they say."""
    words = shlex.split(line)
    if not words:
        raise ValueError(
            "%distributed needs one of: status, start [-n N], restart, close, push NAME..., "
            "pull NAME (or use %%distributed as a cell magic)"
        )
    what, words = words[0], words[1:]
    if what not in _SUBCOMMANDS:
        raise ValueError(
            f"%distributed {what}: unknown; use " + ", ".join(_SUBCOMMANDS[:-1]) + " or pull"
        )
    if what == "status":
        session = Session.current()
        return lambda: print(session if session is not None else "no session is open")
    if what == "start":
        options, rest = _options(words, ("num_processes", "cluster"))
        _no_more(what, rest)
        return _session(options.get("num_processes"), options.get("cluster"))
    session = Session.current()
    if session is None:
        raise ValueError(
            f"%distributed {what}: no session is open (start one: %distributed start -n 2)"
        )
    if what in ("restart", "close"):
        _no_more(what, words)
        return session.restart if what == "restart" else session.close
    if what == "push":
        if not words:
            raise ValueError(
                "%distributed push needs the names to send, e.g. %distributed push model lr"
            )
        missing = [name for name in words if name not in ipython.user_ns]
        if missing:
            raise NameError(f"%distributed push: {', '.join(missing)} not defined in the kernel")
        values = {name: ipython.user_ns[name] for name in words}
        return lambda: session.push(**values)
    if what == "pull":
        if len(words) != 1:
            raise ValueError("%distributed pull takes one name, e.g. %distributed pull loss")
        return lambda: session.pull(words[0])
    raise AssertionError(what)  # every subcommand is handled above


def _no_more(what: str, words: list[str]) -> None:
    if words:
        raise ValueError(f"%distributed {what} takes no arguments, got {' '.join(words)!r}")
