"""One attempt on Slurm: its allocation, one ``srun`` job step of a task per rank (:mod:`.srun`),
the listener the tasks connect back to, the job's rendezvous store, and the threads that read
srun and watch the step; all released (the step ended, a submitted job cancelled) once every
rank's handle is closed, or at once if the attempt cannot start."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from ....protocol import rank_start, remote_link
from ....protocol.node_environment import modules_imported
from ....protocol.spec import WorkerSpec
from ....utils.listening import bind_listener, serve_store
from ...errors import ClusterError
from ..remote.launcher import RemoteAttempt, on_its_node
from ..remote.links import Commands, Relay, RemoteHandle, close_writers, new_handle
from . import endings
from .allocation import Allocation, interruptible
from .handle import SlurmHandle
from .node_check import NodeCheck
from .settings import SlurmCluster
from .srun import SrunOutput, step_command, step_environment

logger = logging.getLogger(__name__)
WATCH_EVERY = 0.1  # seconds between the watcher's looks at the step
QUIET_END = 3.0  # seconds a rank's socket may be closed before a silent end counts as exit 0
STEP_END = 10.0  # seconds srun gets to end its step once told to
CHECK_WAIT = 2.0  # seconds the other tasks get to answer once a node lacks something


class StepAttempt(RemoteAttempt):
    """The allocation, job step, listener, store and threads of one attempt; released (the step
    ended, a submitted job cancelled) once every handle is closed, or at once if it cannot
    start."""

    def __init__(self, settings: SlurmCluster, report: Any = None, stop: Any = None) -> None:
        self.settings = settings
        self.report = report
        self.stop = stop  # a threading.Event: set, a queued job is cancelled
        super().__init__()
        self.handles: list[SlurmHandle] = []
        self.allocation: Allocation | None = None
        self.relay: Relay | None = None
        self.store: Any = None
        self.srun: subprocess.Popen | None = None
        self.output = SrunOutput(self)  # what srun said of the step's tasks
        self.ending: str | None = None  # Slurm's own reason the step ends, once srun said it
        self.check: NodeCheck | None = None  # what the tasks say their nodes have
        self._quiet: dict[int, float] = {}  # rank -> when its socket was found closed
        self._threads: list[threading.Thread] = []

    # -- starting ---------------------------------------------------------------------------

    def _start_ranks(self, specs: list[WorkerSpec], payload: Any) -> None:
        settings = self.settings
        nodes, per_node = settings.layout(len(specs))
        self.allocation = Allocation.acquire(
            settings, nodes, per_node, say=_say, report=self.report, stop=self.stop
        )
        names = self.allocation.nodes
        self.handles = [
            new_handle(
                rank,
                rank % per_node,
                rank // per_node,
                names[rank // per_node],
                self,
                kind=SlurmHandle,
            )
            for rank in range(len(specs))
        ]
        address = settings.address()
        self.store = serve_store(bind_listener(address, 0), address)
        store = (address, self.store.port)
        modules = modules_imported(payload) if isinstance(payload, bytes) else ()
        self.check = NodeCheck(modules, len(specs))
        for handle, spec in zip(self.handles, specs, strict=True):
            handle.start_message = rank_start.pack(
                on_its_node(spec, handle.local_rank, per_node, handle.node_rank, nodes),
                payload,
                store,
                handle.node,
                modules,
            )
            if spec.session:  # commands travel over the rank's socket
                handle.commands = Commands(handle)
        secret = remote_link.new_secret()
        restart = specs[0].context.restart_count
        self.relay = Relay(address, secret, restart, self.handles)
        self._start_step(nodes, per_node, secret, restart)

    def _start_step(self, nodes: int, per_node: int, secret: bytes, restart: int) -> None:
        args = step_command(
            self.settings, self.allocation.job, self.allocation.nodes, nodes, per_node
        )
        env = step_environment(self.relay.address, secret, restart, self.settings.warning_seconds)
        self.srun = subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the kernel's interrupt is for the launch, not for srun
        )
        self.allocation.watch_step(self.srun.pid)
        for target, stream in (
            (self.output.read_stdout, self.srun.stdout),
            (self.output.read_stderr, self.srun.stderr),
        ):
            self._thread(target, stream)
        self._thread(self._watch)

    def _thread(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(
            target=target, args=args, name="notebook_launcher-srun", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def _await_ranks(self) -> None:
        """Until every rank connected, or a task ended before it could, within the timeout."""
        with interruptible():  # a kernel interrupt ends the wait (and the job) at once
            self._await_connected()

    def _await_connected(self) -> None:
        deadline = time.monotonic() + self.settings.timeout
        while not (self.relay.wait_joined(0.05) and self.check.all_heard()):
            if self.check.lacking():
                self._name_what_nodes_lack()
            self.check.wait(0.05 if self.relay.joined() else 0)
            ended = [h for h in self.handles if h.process.known and h.link is None]
            if ended:
                handle = ended[0]
                raise ClusterError(
                    f"rank {handle.rank} (a Slurm task on {handle.node}) ended before it "
                    f"connected to this kernel (exit code {handle.process.exitcode or self.output.codes.get(handle.rank)})"
                    f"{f': {self.ending}' if self.ending else ''}{self.output.said(handle.rank)}"
                )
            if any(h.process.known for h in self.handles):
                return  # a rank that joined already ended: the supervisor reports it
            if time.monotonic() >= deadline:
                missing = [h.rank for h in self.handles if h.link is None]
                if not missing:  # every rank connected; some never said what its node has
                    silent = self.check.silent()
                    raise ClusterError(
                        f"rank {', '.join(map(str, silent))} connected to this kernel but did "
                        f"not say what its node has within {self.settings.timeout:g} s: does "
                        "its node run the same notebook_launcher as this kernel?"
                    )
                raise ClusterError(
                    f"rank {', '.join(map(str, missing))} did not connect to this kernel within "
                    f"{self.settings.timeout:g} s (listening on {host_port(self.relay.address)}): "
                    "can the nodes reach this kernel at that address? (SlurmCluster("
                    "kernel_address=...) sets it, timeout=... waits longer)"
                    f"{self.output.said(missing[0])}"
                )

    def node_heard(self, handle: RemoteHandle, body: bytes) -> None:
        """A task said what its node has: it gets its go if the node can run the launch."""
        if self.check.heard(handle.rank, handle.node, body):
            try:
                handle.link_send(remote_link.GO, b"")
            except BrokenPipeError:  # the task is gone already: its end says why
                pass

    def _name_what_nodes_lack(self) -> None:
        """Raise the :class:`ClusterError` naming each node that lacks something, once every
        task answered or ended (within :data:`CHECK_WAIT`), so that each such node is named."""
        end = time.monotonic() + CHECK_WAIT
        while not self.check.all_heard() and time.monotonic() < end:
            self.check.wait(0.05)
        raise ClusterError(self.check.report())

    # -- what srun says -----------------------------------------------------------------------

    def task_ended(self, task: int, code: int) -> None:
        """srun said task ``task`` ended with ``code``."""
        if task < len(self.handles):
            self._end(self.handles[task], code)

    def slurm_says(self, why: str) -> None:
        """srun said why Slurm ends the step: kept if it tells more than what it said before."""
        if endings.more_telling(self.ending, why) and not self._released:
            self.ending = why

    def node_lost(self, node: str, why: str | None) -> None:
        """srun said Slurm lost ``node`` (``why``: its words for it, if it said why)."""
        if not self._released:
            self._lost(node, why)

    def _lost(self, node: str, why: str) -> None:
        """Slurm lost ``node``: its ranks are over (unreachable, whatever their processes still
        do there), and they, not the ranks Slurm then stops elsewhere, are the failure."""
        self.ending = why
        for handle in self.handles:
            if handle.node == node and not handle.process.known:
                handle.process.killed = True  # what it had still to send will not come
                handle.lost = True
                self._end(handle, -int(signal.SIGKILL))

    def _end(self, handle: SlurmHandle, code: int) -> None:
        death = self.ending if code and self.ending and handle.rank not in self._closed else None
        if handle.link is None:
            close_writers(handle)
        handle.process.ended(code, death)

    def _watch(self) -> None:
        srun = self.srun
        while not self._released:
            for handle in self.handles:
                handle.process.overdue()
                if handle.process.ending and not handle.process.known:
                    since = self._quiet.setdefault(handle.rank, time.monotonic())
                    if time.monotonic() - since >= QUIET_END:
                        self._end(handle, 0)  # gone without a word from srun: it exited 0
            if srun.poll() is not None:
                for thread in self._threads[:2]:  # its last words are read first
                    thread.join(1.0)
                for handle in self.handles:
                    if not handle.process.known:
                        self._end(handle, self.output.codes.get(handle.rank, 0))
                if all(not h.process.is_alive() for h in self.handles):
                    return
            time.sleep(WATCH_EVERY)

    # -- what the handles ask -----------------------------------------------------------------

    def kill(self, handle: RemoteHandle) -> None:
        """Kill the rank: the whole step ends (srun kills its tasks), as the group ends them
        together anyway."""
        handle.process.killed = True
        self._stop_step()

    def srun_done(self) -> bool:
        """Whether srun ended and everything it said was read."""
        return (
            self.srun is not None
            and self.srun.poll() is not None
            and not any(t.is_alive() for t in self._threads[:2])
        )

    def _stop_step(self) -> None:
        srun = self.srun
        if srun is not None and srun.poll() is None:
            try:
                srun.terminate()  # srun kills its step's tasks
            except OSError:
                pass

    def fetch(self, data: bytes) -> bytes:  # pragma: no cover - values come over the socket
        raise ClusterError("a Slurm rank's return value comes over its socket")

    def lost_node(self, handle: RemoteHandle, text: str = "") -> str | None:
        """Slurm's own reason the step ended (time limit, cancelled, node lost, memory), once
        srun said it; None otherwise."""
        return self.ending

    def _release(self) -> None:
        """End the step, close the listener and the store, cancel a submitted job."""
        srun = self.srun
        if srun is not None:
            self._stop_step()
            try:
                srun.wait(STEP_END)
            except subprocess.TimeoutExpired:
                srun.kill()
                srun.wait()
        if self.relay is not None:
            self.relay.close()
        self.store = None  # the store's server ends with it
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(2.0)
        if srun is not None:
            for stream in (srun.stdout, srun.stderr):
                stream.close()
        if self.allocation is not None:
            self.allocation.release(steps_ended=srun is None or srun.returncode is not None)
        for handle in self.handles:
            handle.process.release()


def host_port(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
