"""Run a notebook's training function under torchrun: ``python -m notebook_launcher.run``.

The same function a notebook passes to ``notebook_launcher`` runs unchanged in every torchrun
worker, with the package's worker state (``PartialState`` reads torchrun's environment), output
labelled by rank and one readable report per failure::

    torchrun --nnodes 2 --nproc_per_node 4 --node_rank 0 \\
        --master_addr 10.0.0.1 --master_port 29500 \\
        -m notebook_launcher.run mymodule:train 3e-4

Each argument after the function is given to it as a Python literal when it reads as one
(``3e-4``, ``8``, ``"[1, 2]"``, ``True``), else as a string. The function is named as
``module:function`` (imported; the working directory is on the path) or ``path/to/file.py:function``.

Options (they come before the function; everything after it is the function's):
    --results DIR: save each rank's return value as ``DIR/rank<rank>.pt`` (``torch.save``,
        tensors moved to the CPU).
    --prefix TEMPLATE: the label before each output line (``{rank}``, ``{local_rank}``,
        ``{node_rank}``, ``{role_name}``); default ``"[rank{rank}] "``, ``""`` for none.
    --mixed-precision {no,fp16,bf16,fp8}: for the workers' ``Accelerator``/state.

A failure prints the failed rank's report (rank, node, local rank, pid, exception and traceback)
and is recorded with torch's ``@record``, so torchrun's own summary names the root cause; the
worker then exits with code 1 and torchrun stops the others.
"""

from __future__ import annotations

import argparse
import ast
import faulthandler
import importlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..protocol.channel import READ_CHUNK, LineSplitter
from ..protocol.events import WorkerFailed
from ..protocol.failure import WorkerFailure, looks_secondary
from ..utils.enums import MIXED_PRECISION_CHOICES
from ..utils.tree import to_cpu
from . import prompts
from .bootstrap import shutdown_process_group
from .reporting import flush_streams as _flush

DEFAULT_PREFIX = "[rank{rank}] "
DRAIN_WAIT = 2.0  # seconds to wait for the last output lines at exit
SECONDARY_DELAY = 3.0  # seconds a rank that only lost its peers waits before it reports
NO_INPUT_UNDER_TORCHRUN = (
    "python -m notebook_launcher.run runs it as a torchrun worker, which takes no input (debug it "
    "in a notebook, where a rank's prompt opens in the cell)"
)


def load_function(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` or ``path/to/file.py:function`` (``function`` may be dotted).

    Raises:
        ValueError: ``spec`` is not of that form, or names something that is not callable.
        ImportError: the module or file cannot be imported.
    """
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(
            f"function={spec!r} is not valid: expected 'module:function' or "
            "'path/to/file.py:function'"
        )
    if where.endswith(".py"):
        path = os.path.abspath(where)
        module_name = os.path.splitext(os.path.basename(path))[0]
        loader = importlib.util.spec_from_file_location(module_name, path)
        if loader is None or loader.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(loader)
        sys.modules[module_name] = module  # so pickling its classes by reference works
        loader.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(where)
    target: Any = module
    for part in name.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"function={spec!r} is not valid: {name} is not callable")
    return target


def parse_argument(text: str) -> Any:
    """``text`` as a Python literal if it reads as one, else the string itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _env_int(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class LabelledOutput:
    """Prefix every line this process (and its children) write to fds 1 and 2.

    Each fd is pointed at a pipe; a thread per pipe writes whole lines, labelled, to the
    original stream. A crash report goes to the original stderr directly.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.encode()
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            self._saved[fd] = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            thread = threading.Thread(
                target=self._pump, args=(read_end, self._saved[fd], fd), daemon=True
            )
            thread.start()
            self._threads.append(thread)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        self._crash_file = open(self._saved[2], "w", closefd=False)  # noqa: SIM115
        self.crash_reports_unlabelled()

    def crash_reports_unlabelled(self) -> None:
        """Send faulthandler's crash reports to the original stderr: a crashing process takes
        the labelling thread with it."""
        faulthandler.enable(file=self._crash_file, all_threads=True)

    def _pump(self, read_end: int, target: int, fd: int) -> None:
        splitter = LineSplitter(0, "stdout" if fd == 1 else "stderr")
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(READ_CHUNK)
                lines = splitter.feed(chunk) if chunk else splitter.close()
                for line in lines:
                    os.write(target, self.prefix + line.text.encode("utf-8", "replace") + b"\n")
                if not chunk:
                    return

    def close(self) -> None:
        """Put the original streams back and write out what the pipes still hold."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # closes this process's write end of the pipe
        sys.stdout = sys.__stdout__
        sys.stderr = sys.__stderr__
        for thread in self._threads:
            thread.join(DRAIN_WAIT)


def _report(function_spec: str, exc: BaseException) -> str:
    failure = WorkerFailure.from_event(
        WorkerFailed.from_exception(_env_int("RANK"), exc),
        local_rank=_env_int("LOCAL_RANK"),
        pid=os.getpid(),
        exitcode=1,
        node_rank=_env_int("GROUP_RANK") if _env_int("GROUP_WORLD_SIZE", 1) > 1 else None,
    )
    return f"notebook_launcher.run {function_spec}: " + failure.report(())


def _save_result(directory: str, value: Any) -> None:
    import torch

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"rank{_env_int('RANK')}.pt")
    torch.save(to_cpu(value), path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m notebook_launcher.run",
        description="Run a training function in a torchrun worker (or one plain process).",
    )
    parser.add_argument("function", help="module:function or path/to/file.py:function")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the function")
    parser.add_argument("--results", metavar="DIR", help="save each rank's return value here")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help="label of each output line")
    parser.add_argument("--mixed-precision", choices=MIXED_PRECISION_CHOICES, default=None)
    return parser


def _prefix(template: str) -> str:
    try:
        return template.format(
            rank=_env_int("RANK"),
            local_rank=_env_int("LOCAL_RANK"),
            node_rank=_env_int("GROUP_RANK"),
            role_name=os.environ.get("ROLE_NAME", "default"),
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise SystemExit(
            f"--prefix={template!r} is not valid: the template may use {{rank}}, "
            f"{{local_rank}}, {{node_rank}} and {{role_name}} ({exc!r})"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the function named on the command line in this process; return the exit code."""
    options = _parser().parse_args(argv)
    if options.mixed_precision is not None:
        os.environ["ACCELERATE_MIXED_PRECISION"] = options.mixed_precision
    output = LabelledOutput(_prefix(options.prefix)) if options.prefix else None
    try:
        return _run(options, output)
    finally:
        shutdown_process_group()
        if output is not None:
            output.close()


def _fail(function_spec: str, exc: BaseException, errors: Any) -> None:
    """Report a failure here and in torchrun's error file (its summary names the root cause).

    A failure that only says a peer went away waits a moment first: torchrun stops this rank
    meanwhile if another rank failed first, so that one's report is the root cause.
    """
    kind = type(exc)
    if looks_secondary(f"{kind.__module__}.{kind.__qualname__}", str(exc)):
        time.sleep(SECONDARY_DELAY)
    print(_report(function_spec, exc), file=sys.stderr)
    if isinstance(exc, Exception):
        errors.record_exception(exc)


def _run(options: argparse.Namespace, output: LabelledOutput | None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    errors = get_error_handler()  # what torch's @record uses
    errors.initialize()
    if output is not None:  # initialize() pointed faulthandler at sys.stderr
        output.crash_reports_unlabelled()
    rank = int(os.environ.get("RANK", "0"))
    prompts.install(prompts.RankPrompter(rank, print, None, _flush, NO_INPUT_UNDER_TORCHRUN))
    try:
        function = load_function(options.function)
        value = function(*[parse_argument(a) for a in options.args])
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _fail(options.function, exc, errors)
            return exc.code if isinstance(exc.code, int) else 1
        value = None
    except BaseException as exc:  # report everything, KeyboardInterrupt included
        _fail(options.function, exc, errors)
        return 1
    if options.results:
        _save_result(options.results, value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
