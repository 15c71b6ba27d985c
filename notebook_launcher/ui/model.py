"""The state of a run as the panels show it: a pure reducer of launcher events into plain data.

:class:`RunModel` knows nothing about widgets or terminals. Feed it every event of a launch with
:meth:`RunModel.apply`; read ``ranks`` (one :class:`RankState` each) and ``metrics`` (one
:class:`MetricSeries` per logged name) to draw it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol.cluster_job import ClusterJob
from ..protocol.events import (
    OutputLine,
    RankQuiet,
    SupervisorTick,
    TrackingBatch,
    WorkerExited,
    WorkerFailed,
    WorkerFinished,
    WorkerStarted,
    WorkerStopped,
)
from ..protocol.failure import exit_description
from ..protocol.prompts import DEBUGGER, InputRequest, PromptAnswered
from ..protocol.status import RankStatus, next_status
from .series import MAX_POINTS, MetricSeries

STATES = tuple(RankStatus)
ACTIVE = tuple(status for status in RankStatus if status.active)
MAX_TEXT = 500  # characters kept of an output line, a status or an error (shown on hover)
RATE_SMOOTHING = 0.3  # weight of the newest measurement in a rank's it/s


@dataclass
class RankState:
    """What the panels show about one rank. Times are the model clock's (monotonic seconds)."""

    rank: int
    state: RankStatus = RankStatus.STARTING
    pid: int | None = None
    node: str = ""  # a rank on a cluster: the node it runs on
    step: float | None = None  # the latest step it logged metrics at
    done: int | None = None  # progress: items done, items expected, description
    total: int | None = None
    desc: str | None = None
    rate: float | None = None  # iterations (or steps) per second
    status: str = ""  # its own status text (set_status)
    last_alive: float | None = None
    last_line: str = ""
    error: str = ""  # first line of its exception, or how its process died
    stop_reason: str = ""
    stop_requested: bool = False  # stopped because the user asked (stop, interrupt): no error
    blamed: bool = False  # the rank held responsible for the end of the run
    notice: str = ""  # "no progress for 60 s — in train (...)" until it shows life again
    _notice_since: float | None = field(default=None, repr=False)
    exitcode: int | None = None
    memory: int | None = None  # bytes of device memory held, where known
    logged: int = 0  # metric values received from it
    started: float | None = None
    ended: float | None = None
    _progress: tuple[int, float] | None = field(default=None, repr=False)  # (done, elapsed)
    _stepped: tuple[float, float] | None = field(default=None, repr=False)  # (step, time)

    @property
    def at_prompt(self) -> bool:
        """Whether it waits at a prompt (a debugger, ``input()``) until the user answers."""
        return self._notice_since == float("inf")


class RunModel:
    """Reduces the events of one launch into per-rank state and metric series.

    Args:
        num_processes: number of ranks shown (this node's processes).
        output: the launch's output policy ("all", "raw", "main" or "none"); output lines of ranks it
            hides are not kept as their last line.
        cap: points kept per series.
        clock: monotonic clock, the same the supervisor uses.
        first_rank: the global rank of the first process (nonzero on the other nodes of a
            multi-node launch; events of ranks outside the range are matched by local rank).

    Thread-safe: ``lock`` guards every change; hold it while reading from another thread.
    """

    def __init__(
        self,
        num_processes: int,
        output: str = "all",
        cap: int = MAX_POINTS,
        clock: Callable[[], float] = time.monotonic,
        first_rank: int = 0,
    ) -> None:
        if (
            isinstance(num_processes, bool)
            or not isinstance(num_processes, int)
            or num_processes < 1
        ):
            raise ValueError(f"num_processes={num_processes!r} is not valid: expected an int >= 1")
        if output not in ("all", "raw", "main", "none"):
            raise ValueError(f"output={output!r} is not valid: allowed are 'all', 'main', 'none'")
        self.num_processes = num_processes
        self.output = output
        self.cap = cap
        self.clock = clock
        self.lock = threading.RLock()
        self.first_rank = first_rank
        self.ranks = [RankState(first_rank + index) for index in range(num_processes)]
        self.metrics: dict[str, MetricSeries] = {}
        self.started = clock()
        self.ended: float | None = None
        self.version = 0  # changes with anything shown in the status table
        self.metrics_version = 0  # changes with any new metric value
        self.job: ClusterJob | None = None  # the cluster job the ranks run in, if any
        self._handlers = {
            WorkerStarted: self._started,
            WorkerFinished: self._finished,
            WorkerFailed: self._failed,
            OutputLine: self._line,
            WorkerExited: self._exited,
            WorkerStopped: self._stopped,
            TrackingBatch: self._batch,
            SupervisorTick: self._tick,
            RankQuiet: self._quiet,
            InputRequest: self._prompting,
            PromptAnswered: self._answered,
            ClusterJob: self._job,
        }

    # -- reducing ---------------------------------------------------------------------------------

    def apply(self, event: object, now: float | None = None) -> None:
        """Fold one event into the state; unknown events and unknown ranks are ignored."""
        handler = self._handlers.get(type(event))
        if handler is None:
            return
        with self.lock:
            handler(event, self.clock() if now is None else now)

    def _job(self, event: ClusterJob, now: float) -> None:
        self.job = event
        self.version += 1

    def _rank(self, rank: int) -> RankState | None:
        if not isinstance(rank, int) or rank < 0:
            return None
        index = rank - self.first_rank
        if not 0 <= index < self.num_processes:  # a rendezvous numbered this node differently
            index = rank % self.num_processes
        state = self.ranks[index]
        state.rank = rank
        return state

    def _started(self, event: WorkerStarted, now: float) -> None:
        state = self._rank(event.rank)
        if state is None:
            return
        state.state = next_status(state.state, event)
        state.pid, state.started, state.ended = event.pid, now, None
        state.node = event.node or state.node
        state.error = state.stop_reason = ""
        state.exitcode = None
        state.stop_requested = state.blamed = False
        state.last_alive = now
        self.ended = None
        self.version += 1

    def _finished(self, event: WorkerFinished, now: float) -> None:
        state = self._rank(event.rank)
        if state is not None and self._moved(state, event):
            state.ended, state.last_alive = now, now
            self._retire(event.rank, now)
            self.version += 1

    def _failed(self, event: WorkerFailed, now: float) -> None:
        state = self._rank(event.rank)
        if state is None or not self._moved(state, event):
            return  # a rank the kernel stopped reports its KeyboardInterrupt: still stopped
        kind = event.exc_type.rsplit(".", 1)[-1]
        first = event.message.strip().splitlines()[0] if event.message.strip() else ""
        state.ended, state.last_alive = now, now
        state.error = (f"{kind}: {first}" if first else kind)[:MAX_TEXT]
        self._blame_first(state)
        self._retire(event.rank, now)
        self.version += 1

    def _line(self, event: OutputLine, now: float) -> None:
        state = self._rank(event.rank)
        if state is None:
            return
        state.last_alive = now
        if self.output in ("all", "raw") or (self.output == "main" and event.rank == 0):
            state.last_line = event.text[:MAX_TEXT]
        self.version += 1

    def _exited(self, event: WorkerExited, now: float) -> None:
        state = self._rank(event.rank)
        if state is None:
            return
        state.exitcode = event.exitcode
        if self._moved(state, event):
            state.ended = now
            state.error = f"the process died ({exit_description(event.exitcode)})"
            self._blame_first(state)
            self._retire(event.rank, now)
        self.version += 1

    def _stopped(self, event: WorkerStopped, now: float) -> None:
        blamed = event.blamed
        if blamed:  # the kernel's word on who is responsible overrides the first failure's
            for other in self.ranks:
                other.blamed = other.rank in blamed
            self.version += 1
        state = self._rank(event.rank)
        if state is None or not self._moved(state, event):
            return
        state.ended = now
        state.stop_reason = event.reason[:MAX_TEXT]
        state.stop_requested = event.requested
        self._retire(event.rank, now)
        self.version += 1

    @staticmethod
    def _moved(state: RankState, event: object) -> bool:
        """Apply the status rule all consumers share; whether the status changed."""
        previous, state.state = state.state, next_status(state.state, event)
        return state.state is not previous

    def _blame_first(self, state: RankState) -> None:
        """The first rank to fail is the one to blame, until the kernel says otherwise."""
        if not any(other.blamed for other in self.ranks):
            state.blamed = True

    def _retire(self, rank: int, now: float) -> None:
        for series in self.metrics.values():
            series.retire(rank, now)

    def _tick(self, event: SupervisorTick, now: float) -> None:
        for rank, alive in event.last_alive:
            state = self._rank(rank)
            if state is not None and (state.last_alive is None or alive > state.last_alive):
                state.last_alive = alive
            if state is not None and state.notice and alive > (state._notice_since or 0.0):
                state.notice, state._notice_since = "", None  # a sign of life ends the spell
                self.version += 1

    def _quiet(self, event: RankQuiet, now: float) -> None:
        state = self._rank(event.rank)
        if state is None or state.state not in ACTIVE:
            return
        state.notice = f"no progress for {event.quiet_for:.0f} s — {event.where}"[:MAX_TEXT]
        state._notice_since = event.since
        self.version += 1

    def _prompting(self, event: InputRequest, now: float) -> None:
        state = self._rank(event.rank)
        if state is None or state.state not in ACTIVE:
            return
        state.notice = "in debugger" if event.kind == DEBUGGER else "waiting for input"
        state._notice_since = float("inf")  # until answered, whatever it does meanwhile
        self.version += 1

    def _answered(self, event: PromptAnswered, now: float) -> None:
        state = self._rank(event.rank)
        if state is not None and state._notice_since == float("inf"):
            state.notice, state._notice_since = "", None
            self.version += 1

    def _batch(self, event: TrackingBatch, now: float) -> None:
        state = self._rank(event.rank)
        if state is None:
            return
        state.last_alive = now
        if event.metrics:
            self._metrics(state, event.metrics, now)
        if event.progress is not None:
            self._progress(state, event.progress)
        if event.status is not None:
            state.status = event.status[:MAX_TEXT]
        if event.memory is not None:
            state.memory = event.memory
        self.version += 1

    def _metrics(self, state: RankState, records: tuple, now: float) -> None:
        metrics = self.metrics
        rank = state.rank
        step = None
        touched = set()
        for given, values in records:
            for name, value in values.items():
                series = metrics.get(name)
                if series is None:
                    series = metrics[name] = MetricSeries(
                        name, self.num_processes, self.cap, first_rank=self.first_rank
                    )
                step = series.add(rank, given, float(value), now, advance=False)
                touched.add(series)
            state.logged += len(values)
        for series in touched:  # once per batch: finalising steps costs a pass over the ranks
            series.advance(now)
        self.metrics_version += 1
        if step is None:
            return
        state.step = step
        if state.done is None:  # without a progress bar, it/s is steps per second
            previous = state._stepped
            if previous is not None and now > previous[1] and step > previous[0]:
                state.rate = _smooth(state.rate, (step - previous[0]) / (now - previous[1]))
            state._stepped = (step, now)

    def _progress(self, state: RankState, progress: tuple) -> None:
        desc, done, total, elapsed = progress
        previous = state._progress
        if previous is None or done < previous[0] or desc != state.desc:
            state.rate = done / elapsed if elapsed > 0 else None  # a new bar
        elif elapsed > previous[1] and done > previous[0]:
            state.rate = _smooth(state.rate, (done - previous[0]) / (elapsed - previous[1]))
        state.desc, state.done, state.total = desc, done, total
        state._progress = (done, elapsed)

    def finish(self, now: float | None = None) -> None:
        """The run is over: finalise the across-rank series and stop the clock."""
        with self.lock:
            for series in self.metrics.values():
                series.close()
            if self.ended is None:
                self.ended = self.clock() if now is None else now
            self.version += 1
            self.metrics_version += 1

    # -- reading ----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """How many ranks are in each state, for every state with at least one."""
        with self.lock:
            found: dict[str, int] = {}
            for state in self.ranks:
                found[state.state] = found.get(state.state, 0) + 1
        return {name: found[name] for name in STATES if name in found}

    @property
    def outcome(self) -> str:
        """ "running" while any rank runs, else "failed", "stopped" or "finished".

        "stopped" is a run the user stopped (a stop request, an interrupt): not an error. A run
        stopped by a timeout, a stall or another node's failure counts as "failed".
        """
        with self.lock:
            states = {state.state for state in self.ranks}
            stopped = [state for state in self.ranks if state.state == "stopped"]
            blamed = any(state.blamed for state in self.ranks)
        if "failed" in states or blamed:
            return "failed"
        if states & set(ACTIVE):
            return "running" if self.ended is None else "stopped"
        if not stopped:
            return "finished"
        return "stopped" if all(state.stop_requested for state in stopped) else "failed"

    @property
    def quiet(self) -> bool:
        """Nothing was logged: no metrics, progress, status or memory from any rank."""
        with self.lock:
            return not self.metrics and all(
                state.done is None and not state.status and state.memory is None
                for state in self.ranks
            )

    def elapsed(self, now: float | None = None) -> float:
        end = self.ended if self.ended is not None else (self.clock() if now is None else now)
        return max(0.0, end - self.started)

    def summary(self) -> str:
        """One deterministic line: ranks per state and the metric names."""
        counts = ", ".join(f"{n} {name}" for name, n in self.counts().items())
        line = f"{self.num_processes} {'rank' if self.num_processes == 1 else 'ranks'}: {counts}"
        if self.metrics:
            line += "; metrics: " + ", ".join(sorted(self.metrics))
        return line


def _smooth(previous: float | None, latest: float) -> float:
    if previous is None:
        return latest
    return previous + RATE_SMOOTHING * (latest - previous)
