"""Multi-node launches: the nodes meet in a torch.distributed store, start together, stop together.

Each node's kernel joins one rendezvous before it starts its processes: a ``TCPStore`` that node
0's kernel hosts (``rdzv_backend="static"``, served by a process of its own, see
:mod:`.store_process`) or torch's dynamic rendezvous (``"c10d"``, see :mod:`.c10d`). While the
processes run, every node's supervisor watches a few keys of the shared store, under a prefix of
their own for each attempt:

- ``node/<n>``: node n arrived for this attempt (with its process count, host and pid);
- ``beat/<n>``: a counter node n increments while it runs; a node that stops counting is gone;
- ``failed``: the first failure of the attempt, written by the node where it happened;
- ``done/<n>``: node n's processes all returned; ``left/<n>``: node n is through with the store.

The workers use the same store through torch's ``env://`` rendezvous
(``TORCHELASTIC_USE_AGENT_STORE``); as their keys do not name the attempt, node 0 clears them
before a restart's workers start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ...protocol.failure import WorkerFailure, looks_secondary
from ..errors import AttemptFailed, LaunchTimeoutError, RemoteNodeFailedError
from ..planning.plan import LaunchPlan
from .local import Attempt

NAMESPACE = "notebook_launcher"
CLOSED_KEY = f"{NAMESPACE}/closed"  # set by the hosting kernel once its launch is ending
POLL_EVERY = 0.2  # seconds between looks at the shared store
PEER_SILENCE = 15.0  # a node whose heartbeat counter stands still this long is taken for gone
SECONDARY_GRACE = 5.0  # how long a node whose ranks only lost their peers waits for the cause
LEAVE_GRACE = 5.0  # how long the hosting kernel keeps the store for the others to read the end
# Say what this node waits for once it has waited this long: a node that is merely starting
# (importing torch on a busy machine) takes a few seconds, and is no news.
WAIT_NOTICE_AFTER = 10.0
REPORT_LIMIT = 20_000  # characters of a failure report shared with the other nodes
LOCAL_SUMMARY = 200  # characters of this node's own (consequential) failure kept in the message
STORE_ERRORS = (RuntimeError, OSError, TimeoutError, ValueError)


def ranks_text(ranks: Any) -> str:
    return ", ".join(str(r) for r in ranks)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _failure_of(error: BaseException) -> WorkerFailure | None:
    failure = getattr(error, "launch_failure", None) or getattr(error, "failure", None)
    return failure if isinstance(failure, WorkerFailure) else None


def _is_remote(exc: BaseException) -> bool:
    if isinstance(exc, AttemptFailed):
        exc = exc.error
    return isinstance(exc, RemoteNodeFailedError)


def _is_secondary(exc: BaseException) -> bool:
    """Whether a local failure looks like the consequence of a peer going away."""
    failure = _failure_of(exc.error) if isinstance(exc, AttemptFailed) else None
    if failure is None or failure.exc_type is None:
        return False
    return looks_secondary(failure.exc_type, failure.message)


def describe_failure(exc: BaseException, node: int) -> tuple[str, str, bool]:
    """``(summary, report, restartable)`` of a failure on this node, for the other nodes."""
    if isinstance(exc, AttemptFailed):
        failure = _failure_of(exc.error)
        report = failure.report(()) if failure is not None else str(exc.error)
        return exc.summary, report[:REPORT_LIMIT], True
    if isinstance(exc, KeyboardInterrupt):
        return "its launch was interrupted (KeyboardInterrupt)", "", False
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"its launch ended with {type(exc).__name__}: {first}", "", False


class NodeAttempt(Attempt):
    """One attempt of a multi-node launch, as one node sees it."""

    def __init__(
        self,
        plan: LaunchPlan,
        port: int,
        store: Any,
        restart: int,
        endpoint: str,
        host_node: int | None,
        notice: Callable[[str], None],
    ) -> None:
        super().__init__(plan, port)
        self.store = store
        self.restart = restart
        self.endpoint = endpoint
        self.host_node = host_node
        self.notice = notice
        self.me = plan.node_rank
        self.peers = [n for n in range(plan.num_nodes) if n != self.me]
        now = time.monotonic()
        self._beats = {n: (-1, now) for n in self.peers}
        self._next_poll = now
        self.gone: set[int] = set()  # peers taken for dead: nobody waits for them to leave

    @property
    def local_ranks(self) -> tuple[int, ...]:
        return tuple(self.plan.node_ranks(self.me))

    # -- while this node's processes run ---------------------------------------------------------

    def watch(self) -> BaseException | None:
        """Beat, and look for another node's failure or silence (at most every POLL_EVERY s)."""
        now = time.monotonic()
        if now < self._next_poll:
            return None
        self._next_poll = now + POLL_EVERY
        try:
            self.store.add(f"beat/{self.me}", 1)
            flag = self._flag()
            if flag is not None and flag.get("node") != self.me:
                return self._remote(flag)
            gone = self._silent_peers(now)
        except STORE_ERRORS as exc:
            return self._lost(exc)
        if gone:
            self.gone.update(gone)
            silence = f"it sent no heartbeat for {PEER_SILENCE:g} s (its kernel died or hangs)"
            return self._remote({"node": gone[0], "summary": silence, "restartable": False})
        return None

    def _flag(self) -> dict | None:
        if not self.store.check(["failed"]):
            return None
        return json.loads(self.store.get("failed"))

    def _silent_peers(self, now: float) -> list[int]:
        gone = []
        for node in self.peers:
            count = self.store.add(f"beat/{node}", 0)
            last, since = self._beats[node]
            if count != last:
                self._beats[node] = (count, now)
            elif now - since >= PEER_SILENCE:
                gone.append(node)
        return gone

    def _remote(self, flag: dict, local: str | None = None) -> BaseException:
        node = flag.get("node")
        where = "another node" if node is None else f"node {node}"
        summary = flag.get("summary", "failed")
        lines = [
            f"{where} {'failed' if flag.get('restartable') else 'stopped'}: {summary}",
            f"This node (node {self.me}) stopped its ranks {ranks_text(self.local_ranks)} "
            "because of it.",
        ]
        if local:
            local = local if len(local) <= LOCAL_SUMMARY else local[: LOCAL_SUMMARY - 3] + "..."
            lines.append(f"Here, {local} (a consequence: its peers were gone).")
        report = flag.get("report", "")
        if report:
            lines += ["", f"Report from {where}:", _indent(report)]
        error = RemoteNodeFailedError("\n".join(lines), node, summary, report, self.local_ranks)
        if flag.get("restartable") and self.restart < self.plan.max_restarts:
            return AttemptFailed(error, lines[0])
        return error

    def _lost(self, exc: BaseException) -> RemoteNodeFailedError:
        host = "another node" if self.host_node is None else f"node {self.host_node}"
        detail = (str(exc).strip().splitlines() or [""])[0]
        summary = f"the rendezvous store at {self.endpoint} (hosted by {host}) went away"
        message = (
            f"lost the connection to the rendezvous store at {self.endpoint}, hosted by {host}: "
            f"its kernel stopped or the network failed ({type(exc).__name__}: {detail}). This "
            f"node (node {self.me}) stopped its ranks {ranks_text(self.local_ranks)}."
        )
        return RemoteNodeFailedError(message, self.host_node, summary, "", self.local_ranks)

    # -- endings ----------------------------------------------------------------------------------

    def finish(self, deadline: float | None) -> None:
        """This node's ranks all returned: wait until every node's have, or one node failed.

        Raises:
            RemoteNodeFailedError (or AttemptFailed carrying one): another node failed meanwhile.
            LaunchTimeoutError: ``deadline`` passed while other nodes still ran.
        """
        started = time.monotonic()
        told = False
        try:
            self.store.set(f"done/{self.me}", "1")
        except STORE_ERRORS as exc:
            raise self._lost(exc) from None
        while True:
            try:
                waiting = [n for n in self.peers if not self.store.check([f"done/{n}"])]
            except STORE_ERRORS as exc:
                raise self._lost(exc) from None
            if not waiting:
                return
            stop = self.watch()
            if stop is not None:
                raise stop
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise LaunchTimeoutError(
                    f"the launch exceeded its timeout while node {ranks_text(waiting)} still "
                    f"ran; this node's ranks {ranks_text(self.local_ranks)} had returned.",
                    {},
                )
            if not told and now - started >= WAIT_NOTICE_AFTER:
                told = True
                self.notice(
                    f"notebook_launcher: node {self.me}'s ranks all returned; waiting for node "
                    f"{ranks_text(waiting)} to finish"
                )
            time.sleep(POLL_EVERY)

    def failed(self, exc: BaseException) -> BaseException:
        """Tell the other nodes that this attempt failed here; return what this node raises.

        A local failure that only says the peers went away (their node failed first) waits a
        little for that node's report and raises it, the local failure noted.
        """
        if _is_remote(exc):
            return exc
        summary, report, restartable = describe_failure(exc, self.me)
        flag = {"node": self.me, "summary": summary, "report": report, "restartable": restartable}
        secondary = _is_secondary(exc)
        try:
            if secondary:
                cause = self._await_cause()
                if cause is not None:
                    return self._remote(cause, local=summary)
            self.store.compare_set("failed", "", json.dumps(flag))
        except STORE_ERRORS as error:
            # The store went away with the kernel that hosted it: when this node's ranks only
            # lost their peers, that is the cause to report.
            return self._lost(error) if secondary else exc
        return exc

    def _await_cause(self) -> dict | None:
        """Another node's failure report, if one arrives within SECONDARY_GRACE; else, if a
        node stopped beating meanwhile, that node's silence."""
        beats = {n: self.store.add(f"beat/{n}", 0) for n in self.peers}
        end = time.monotonic() + SECONDARY_GRACE
        while time.monotonic() < end:
            flag = self._flag()
            if flag is not None and flag.get("node") != self.me:
                return flag
            time.sleep(POLL_EVERY / 2)
        silent = [n for n in self.peers if self.store.add(f"beat/{n}", 0) == beats[n]]
        if not silent:
            return None
        self.gone.update(silent)
        summary = f"it sent no heartbeat for {SECONDARY_GRACE:g} s (its kernel died)"
        return {"node": silent[0], "summary": summary, "restartable": False}

    def release(self) -> None:
        """Drop the store: a server lives as long as anything holds it, a traceback included."""
        self.store = None
