"""Helpers for the multi-node tests: "nodes" are separate processes on loopback.

A node is a process forked from the test process (so it starts without importing torch again)
that calls ``notebook_launcher`` as a notebook cell would, with its output going to files of
its own. Every process started here has a deadline and is killed (its workers die with it) when
the test ends, however it ends.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import jobs
import psutil

from notebook_launcher import notebook_launcher

HERE = Path(__file__).parent
PROCESS_TIMEOUT = 60.0  # seconds any process of these tests may run
# No live status views in the nodes' output, where the launcher has them.
QUIET = {"ui": "none"} if "ui" in inspect.signature(notebook_launcher).parameters else {}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Node:
    """One node's call: ``notebook_launcher(jobs.<function>, args, **kwargs)``."""

    function: str
    args: list
    kwargs: dict


def on_node(function: str, args: list, **kwargs: object) -> Node:
    return Node(function, args, {**QUIET, **kwargs})


@dataclass
class Finished:
    """What one process left: its exit code, its output and (for nodes) what the call gave."""

    returncode: int | None
    stdout: str
    stderr: str
    result: dict = field(default_factory=dict)

    @property
    def lines(self) -> list[str]:
        return (self.stdout + self.stderr).splitlines()


def _listening() -> list[str]:
    return sorted(
        f"{c.laddr.ip}:{c.laddr.port}"
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    )


def _call(spec: Node) -> dict:
    """Run the launch; describe its values or its exception, and what still listens after it
    (the exception is kept alive meanwhile, as a notebook keeps the last one)."""
    kept = None
    try:
        result = notebook_launcher(getattr(jobs, spec.function), tuple(spec.args), **spec.kwargs)
        report = {"ok": True, "values": result.values, "restarts": result.restarts}
    except BaseException as exc:  # every failure is what the tests look at
        kept = exc
        report = {
            "ok": False,
            "error_type": type(exc).__name__,
            "error": str(exc),
            "notes": list(getattr(exc, "__notes__", [])),
            "cause": str(exc.__cause__ or ""),
            "node_rank": getattr(exc, "node_rank", None),
            "missing_nodes": list(getattr(exc, "missing_nodes", ()) or ()),
            "missing_ranks": list(getattr(exc, "missing_ranks", ()) or ()),
            "endpoint": getattr(exc, "endpoint", None),
        }
    report["listening"] = _listening()
    del kept
    return report


def _node_main(spec: Node, out: str, err: str, result: str) -> None:
    """Body of a forked node: own output files, one launch, its report written as JSON."""
    code = 1
    try:
        for fd, path in ((1, out), (2, err)):
            target = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        report = _call(spec)
        Path(result).write_text(json.dumps(report))
        code = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never run the test process's exit handlers


def _read(path: str) -> str:
    return Path(path).read_text() if os.path.exists(path) else ""


class Nodes:
    """Forked nodes that are running: their processes, their output so far, and the wait."""

    def __init__(self, started: list) -> None:
        self._started = started
        self.procs = [proc for proc, _ in started]

    def output(self, index: int) -> str:
        """What node ``index`` printed so far (stdout and stderr)."""
        out, err, _ = self._started[index][1]
        return _read(out) + _read(err)

    def wait_for_line(self, index: int, text: str, timeout: float = PROCESS_TIMEOUT) -> None:
        end = time.monotonic() + timeout
        while text not in self.output(index):
            if time.monotonic() >= end or not self.procs[index].is_alive():
                raise AssertionError(f"node {index} never printed {text!r}: {self.output(index)}")
            time.sleep(0.05)

    def wait(self, timeout: float = PROCESS_TIMEOUT) -> list[Finished]:
        end = time.monotonic() + timeout
        for proc in self.procs:
            proc.join(max(0.1, end - time.monotonic()))
        finished = []
        for proc, (out, err, result) in self._started:
            if proc.is_alive():
                proc.kill()
                proc.join(10)
            report = json.loads(_read(result) or "{}")
            finished.append(Finished(proc.exitcode, _read(out), _read(err), report))
        return finished


@contextmanager
def nodes(*specs: Node) -> Iterator[Nodes]:
    """Fork one node per spec, all at once; every one of them is dead when this ends."""
    from notebook_launcher.launch.launchers import ForkLauncher

    ForkLauncher().prepare()  # its imports once here, rather than once in every node
    context = multiprocessing.get_context("fork")
    started = []
    with tempfile.TemporaryDirectory() as folder:
        try:
            for index, spec in enumerate(specs):
                paths = [os.path.join(folder, f"{index}.{n}") for n in ("out", "err", "json")]
                for path in paths[:2]:
                    Path(path).touch()
                proc = context.Process(target=_node_main, args=(spec, *paths), daemon=False)
                proc.start()
                started.append((proc, paths))
            yield Nodes(started)
        finally:
            for proc, _ in started:
                if proc.is_alive():
                    proc.kill()
                proc.join(10)


def run_nodes(*specs: Node, timeout: float = PROCESS_TIMEOUT) -> list[Finished]:
    """Run one forked node per spec, all at once; return what each left, in order."""
    with nodes(*specs) as running:
        return running.wait(timeout)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the process and everything in its session (torchrun's workers outlive a killed
    torchrun otherwise)."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextmanager
def processes(commands: list[list[str]], cwd: Path = HERE) -> Iterator:
    """Start every command at once, each in a session of its own; yield ``wait()``, which
    returns their :class:`Finished`. Whatever is left of them is killed at the end."""
    started: list[tuple[subprocess.Popen, object, object]] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        for command in commands:
            out = tempfile.TemporaryFile(mode="w+")
            err = tempfile.TemporaryFile(mode="w+")
            proc = subprocess.Popen(
                command, stdout=out, stderr=err, cwd=cwd, env=env, start_new_session=True
            )
            started.append((proc, out, err))

        def wait(timeout: float = PROCESS_TIMEOUT) -> list[Finished]:
            end = time.monotonic() + timeout
            finished = []
            for proc, out, err in started:
                try:
                    proc.wait(max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                out.seek(0)
                err.seek(0)
                finished.append(Finished(proc.returncode, out.read(), err.read()))
            return finished

        yield wait
    finally:
        for proc, out, err in started:
            _kill_group(proc)  # the session may hold workers even once the leader is gone
            out.close()
            err.close()
