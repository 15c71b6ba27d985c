"""Drive a real ipykernel through jupyter_client and collect what one cell sends on IOPub.

Every wait here is bounded: a cell that does not finish in time fails the test with what it
sent so far instead of hanging the suite.
"""

from __future__ import annotations

import queue
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager

from helpers.processtree import live_descendants

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
KERNEL_READY_TIMEOUT = 60.0


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


class ThisPythonSpecs(KernelSpecManager):
    """Resolves "python3" to an ipykernel running this interpreter, whatever is installed."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name=f"{kernel_name} (this Python)",
            language="python",
            interrupt_mode="signal",
        )


def start_kernel() -> tuple[KernelManager, object]:
    """Start an ipykernel running this very Python, and a client connected to it.

    The kernel spec is built here rather than looked up, so the kernel imports the package under
    test whatever kernelspecs the machine has installed.
    """
    km = KernelManager(kernel_name="python3", kernel_spec_manager=ThisPythonSpecs())
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=KERNEL_READY_TIMEOUT)
    except BaseException:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


def kernel_pid(km: KernelManager) -> int:
    return km.provisioner.process.pid


class Kernel:
    """A started kernel, its client, and the processes it started, for checks after the test."""

    def __init__(self) -> None:
        self.km, self.kc = start_kernel()
        self.pid = kernel_pid(self.km)
        self.watched: list[int] = []  # worker pids a test saw; killed at close if still alive

    def execute(self, code: str, timeout: float, store_history: bool = False) -> Cell:
        return execute(self.kc, code, timeout, store_history)

    def start(self, code: str, store_history: bool = False, allow_stdin: bool = False) -> Cell:
        return start(self.kc, code, store_history, allow_stdin)

    def watch(self, pids: list[int]) -> None:
        """Check at close that these processes ended (and kill them if not)."""
        self.watched += pids

    def workers(self) -> list[psutil.Process]:
        return live_descendants(self.pid)

    def close(self) -> list[str]:
        """Shut the kernel down; return a description of every process it left running.

        Workers must be gone once a cell has ended (after a bounded grace period), and whatever
        the kernel started (multiprocessing's resource tracker included) must end with it.
        """
        problems = []
        wait_until(lambda: not self.workers(), 2.0)
        for proc in self.workers():
            problems.append(f"worker left running after the cell ended: {_describe(proc)}")
        try:
            started = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            started = []
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)
        pids = [p.pid for p in started] + self.watched
        wait_until(lambda: not alive(pids), 3.0)
        for pid in alive(pids):
            problems.append(f"process left running after the kernel shut down: pid {pid}")
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        return problems


def _describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} {' '.join(proc.cmdline())}"
    except psutil.Error:
        return f"pid {proc.pid}"


def alive(pids: list[int]) -> list[int]:
    """The pids in ``pids`` that still run (zombies count as gone)."""
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.Error:
            pass
    return left


def wait_until(condition: Callable[[], object], timeout: float, interval: float = 0.02):
    """Poll ``condition`` until it returns something truthy or ``timeout`` passes; return it."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= end:
            return value
        time.sleep(interval)


@dataclass
class Cell:
    """One executing cell: its request id and the IOPub messages collected for it so far."""

    kc: object
    msg_id: str
    sent_at: float
    messages: list[dict] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)  # monotonic arrival time of each message
    done: bool = False

    def poll(self, timeout: float) -> dict | None:
        """Take the next IOPub message of this cell, waiting up to ``timeout``; None if none."""
        end = time.monotonic() + timeout
        while not self.done:
            left = end - time.monotonic()
            if left <= 0:
                return None
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") != self.msg_id:
                continue  # another cell's, or the kernel's own startup messages
            self.messages.append(msg)
            self.arrived.append(time.monotonic())
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                self.done = True
            return msg
        return None

    def wait_for(self, predicate: Callable[[Cell], bool], timeout: float) -> bool:
        """Collect messages until ``predicate(self)`` holds, the cell ends, or ``timeout``."""
        end = time.monotonic() + timeout
        while not predicate(self):
            left = end - time.monotonic()
            if left <= 0 or self.done:
                return predicate(self)
            self.poll(left)
        return True

    def prompt(self, timeout: float) -> str:
        """Wait for this cell's next ``input_request`` (collecting IOPub meanwhile); its prompt.
        Fails with the output so far if none comes in time."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.done:
            try:
                msg = self.kc.get_stdin_msg(timeout=0.05)
            except queue.Empty:
                self.poll(0.05)
                continue
            if msg.get("parent_header", {}).get("msg_id") != self.msg_id:
                continue
            if msg["msg_type"] == "input_request":
                self.drain_iopub()
                return msg["content"]["prompt"]
        raise AssertionError(
            f"no input request within {timeout} s (cell done: {self.done}); output so far:\n"
            f"{self.output()}"
        )

    def answer(self, text: str) -> None:
        """Reply to the pending ``input_request`` with ``text``."""
        self.kc.input(text)

    def converse(self, lines: list[str], timeout: float) -> list[str]:
        """Answer one prompt after another with ``lines``; the prompts, in order."""
        prompts = []
        for line in lines:
            prompts.append(self.prompt(timeout))
            self.answer(line)
        return prompts

    def drain_iopub(self, quiet: float = 0.2) -> None:
        """Collect IOPub messages until none came for ``quiet`` seconds."""
        while self.poll(quiet) is not None:
            pass

    def finish(self, timeout: float) -> list[dict]:
        """Collect until the kernel reports idle for this cell; fail if it takes longer."""
        self.wait_for(lambda cell: cell.done, timeout)
        if not self.done:
            raise AssertionError(
                f"cell did not finish within {timeout} s; output so far:\n{self.output()}"
            )
        return self.messages

    # -- views ------------------------------------------------------------------------------------

    def of_type(self, msg_type: str) -> list[dict]:
        return [m for m in self.messages if m["msg_type"] == msg_type]

    def stream(self, name: str | None = None) -> str:
        """All text of the cell's stream messages (``name``: "stdout", "stderr" or both)."""
        return "".join(
            m["content"]["text"]
            for m in self.of_type("stream")
            if name is None or m["content"]["name"] == name
        )

    def output_blocks(self) -> list[str]:
        """The outputs JupyterLab draws for the cell, by kind ("stdout", "stderr", "display",
        "execute_result", "error"): consecutive stream messages of one name are one output,
        anything else starts another; clearing the cell's outputs drops them."""
        blocks: list[str] = []
        for msg in self.messages:
            kind = msg["msg_type"]
            if kind == "stream":
                name = msg["content"]["name"]
                if not blocks or blocks[-1] != name:
                    blocks.append(name)
            elif kind == "display_data":
                blocks.append("display")
            elif kind in ("execute_result", "error"):
                blocks.append(kind)
            elif kind == "clear_output":
                blocks.clear()
        return blocks

    def error(self) -> dict | None:
        errors = self.of_type("error")
        return errors[-1]["content"] if errors else None

    def error_at(self) -> float | None:
        """Seconds from sending the cell to the arrival of its error message."""
        for msg, at in zip(self.messages, self.arrived, strict=True):
            if msg["msg_type"] == "error":
                return at - self.sent_at
        return None

    def traceback(self) -> str:
        error = self.error()
        return strip_ansi("\n".join(error["traceback"])) if error else ""

    def result(self) -> str | None:
        results = self.of_type("execute_result")
        return results[-1]["content"]["data"]["text/plain"] if results else None

    def output(self) -> str:
        """Everything the cell showed, as text, for assertion messages."""
        parts = [self.stream()]
        if self.result() is not None:
            parts.append(self.result())
        parts.append(self.traceback())
        return "\n".join(p for p in parts if p)


def start(kc, code: str, store_history: bool = False, allow_stdin: bool = False) -> Cell:
    """Send ``code`` for execution and return the cell, without waiting for it
    (``store_history``: numbered ``In[N]`` as a notebook's cells are; ``allow_stdin``: the cell
    may ask for input, answered with :meth:`Cell.answer`)."""
    msg_id = kc.execute(code, store_history=store_history, allow_stdin=allow_stdin)
    return Cell(kc, msg_id, time.monotonic())


def execute(kc, code: str, timeout: float, store_history: bool = False) -> Cell:
    """Run ``code`` in the kernel and collect its IOPub messages until the kernel is idle.

    The returned cell's ``messages`` are that cell's IOPub messages (status busy, execute_input,
    stream, execute_result/error, status idle), in arrival order.
    """
    cell = start(kc, code, store_history)
    cell.finish(timeout)
    return cell
