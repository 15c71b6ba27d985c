"""The supervisor's parts, one at a time, with fake handles, scripted stacks and an injected clock:
the status rule, the work meter, the watchdogs, and the worker group's reading of pipes."""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass, field

import pytest

from notebook_launcher.launch.errors import DeadlockError, LaunchTimeoutError, WorkerStalledError
from notebook_launcher.launch.launchers import WorkerHandle
from notebook_launcher.launch.supervision.group import WorkerGroup
from notebook_launcher.launch.supervision.liveness import (
    WORK_CPU_SHARE,
    Usage,
    WorkMeter,
    stack_signature,
)
from notebook_launcher.launch.supervision.watchdogs import (
    DEADLOCK_RECHECK,
    DeadlockWatchdog,
    StallWatchdog,
    TimeoutWatchdog,
)
from notebook_launcher.protocol.channel import LineSplitter
from notebook_launcher.protocol.events import (
    OutputLine,
    RankQuiet,
    WorkerExited,
    WorkerFailed,
    WorkerFinished,
    WorkerStarted,
    WorkerStopped,
)
from notebook_launcher.protocol.status import RankStatus, next_status

BOOT = '  File "/env/lib/python3.11/site-packages/notebook_launcher/worker/bootstrap.py", line 190 in run_worker'


def stack(*frames: str) -> str:
    """A faulthandler dump of the main thread: ``frames`` innermost first, then the bootstrap."""
    return "\n".join(["Current thread 0x00007f00 (most recent call first):", *frames, BOOT])


def frame(file: str, line: int, function: str) -> str:
    return f'  File "{file}", line {line} in {function}'


USER = "/home/me/train.py"
IN_BARRIER = stack(
    frame(
        "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 4800, "barrier"
    ),
    frame(USER, 12, "train"),
)
SLEEPING = stack(frame(USER, 9, "train"))


def in_exchange(line: int) -> str:
    """Waiting in the shared-memory exchange, whose polling loop is at ``line``."""
    return stack(
        frame(
            "/env/lib/python3.11/site-packages/notebook_launcher/backends/shared_memory.py",
            line,
            "_wait",
        ),
        frame(
            "/env/lib/python3.11/site-packages/notebook_launcher/ops/collectives.py", 300, "reduce"
        ),
        frame(USER, 14, "train"),
    )


# -- the status rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, event, expected",
    [
        (RankStatus.STARTING, WorkerStarted(0, 1, 0.0), RankStatus.RUNNING),
        (RankStatus.FAILED, WorkerStarted(0, 1, 0.0), RankStatus.RUNNING),  # a restart
        (RankStatus.RUNNING, WorkerFinished(0, b"", 0.0), RankStatus.FINISHED),
        (RankStatus.RUNNING, WorkerExited(0, -9), RankStatus.FAILED),
        (RankStatus.STARTING, WorkerExited(0, 1), RankStatus.FAILED),
        (RankStatus.RUNNING, WorkerStopped(0, "timeout"), RankStatus.STOPPED),
        (RankStatus.STOPPED, WorkerExited(0, 1), RankStatus.STOPPED),
        (RankStatus.FINISHED, WorkerExited(0, 0), RankStatus.FINISHED),
        (RankStatus.FINISHED, WorkerStopped(0, "timeout"), RankStatus.FINISHED),
        (RankStatus.RUNNING, OutputLine(0, "stdout", "x"), RankStatus.RUNNING),
    ],
)
def test_next_status(status, event, expected):
    assert next_status(status, event) is expected


def test_a_stopped_rank_reporting_its_interrupt_stays_stopped():
    failed = WorkerFailed.from_exception(0, KeyboardInterrupt("stopped"))
    assert next_status(RankStatus.STOPPED, failed) is RankStatus.STOPPED
    assert next_status(RankStatus.RUNNING, failed) is RankStatus.FAILED


def test_statuses_compare_as_their_names():
    assert RankStatus.RUNNING == "running" and str(RankStatus.FAILED) == "failed"
    assert {RankStatus.STOPPED: 1}["stopped"] == 1


# -- the work meter -------------------------------------------------------------------------------


def scripted(usages: list[Usage | None]):
    queue = list(usages)
    return lambda pid: queue.pop(0)


def test_work_is_a_share_of_a_core_not_a_tick():
    waiting = Usage(cpu=0.0, io=0, rss=1)
    meter = WorkMeter(
        scripted(
            [
                waiting,
                Usage(0.01, 0, 1),  # one 10 ms tick in 0.5 s: gloo's thread, not work
                Usage(0.01 + WORK_CPU_SHARE * 0.5, 0, 1),  # a tenth of a core: work
                Usage(0.01, 0, 2),  # a child that ended took its CPU time: never backwards
                Usage(0.06, 2 << 20, 3),  # 2 MiB written in 0.5 s: work
            ]
        )
    )
    assert meter.worked(0, 1, 0.0) is False  # the first sample only sets the baseline
    assert meter.worked(0, 1, 0.5) is False
    assert meter.worked(0, 1, 1.0) is True
    assert meter.worked(0, 1, 1.5) is False
    assert meter.worked(0, 1, 2.0) is True
    assert meter.rss[0] == 3


def test_the_last_memory_measured_is_the_last_of_a_live_process():
    # The OOM killer's victim, sampled while it is torn down, reads as 0 resident bytes: the
    # report keeps what it held before.
    meter = WorkMeter(scripted([Usage(0.0, 0, 250 << 20), Usage(0.0, 0, 0)]))
    meter.worked(0, 1, 0.0)
    meter.worked(0, 1, 0.5)
    assert meter.rss[0] == 250 << 20


def test_a_process_that_is_gone_did_no_work():
    meter = WorkMeter(scripted([Usage(0.0, 0, 1), None]))
    meter.worked(0, 1, 0.0)
    assert meter.worked(0, 1, 0.5) is False


def test_stack_signatures_ignore_the_launchers_polling_lines():
    assert stack_signature(in_exchange(380)) == stack_signature(in_exchange(395))
    assert stack_signature(SLEEPING) != stack_signature(stack(frame(USER, 10, "train")))
    assert stack_signature("no stack at all") is None


# -- the watchdogs --------------------------------------------------------------------------------


@dataclass(eq=False)
class FakeHandle:
    rank: int
    status: RankStatus = RankStatus.RUNNING
    last_alive: float = 0.0
    finished_at: float | None = None


@dataclass
class FakeSink:
    notices: list[str] = field(default_factory=list)

    def notice(self, text: str) -> None:
        self.notices.append(text)


class FakeGroup:
    """The watchdogs' view of a group, with scripted stacks (one dict per call, the last one
    repeated)."""

    def __init__(self, statuses: list[RankStatus], stacks: list[dict[int, str]]) -> None:
        self.handles = [FakeHandle(rank, status) for rank, status in enumerate(statuses)]
        self.sink = FakeSink()
        self.events: list[object] = []
        self._stacks = stacks
        self.samples = 0

    def active(self):
        return [h for h in self.handles if h.status.active]

    def last_progress(self) -> float:
        return max(h.last_alive for h in self.handles)

    def collect_stacks(self) -> dict[int, str]:
        self.samples += 1
        return self._stacks[min(self.samples, len(self._stacks)) - 1]

    def publish(self, event: object) -> None:
        self.events.append(event)


def run_until(watchdog, start: float, end: float, step: float = 0.1):
    """Check every ``step`` seconds of fake time; the first verdict and when it came."""
    now = start
    while now <= end:
        verdict = watchdog.check(now)
        if verdict is not None:
            return verdict, now
        now = round(now + step, 6)
    return None, None


def test_a_rank_sleeping_while_the_other_waits_in_a_barrier_stalls_the_job_on_time():
    group = FakeGroup([RankStatus.RUNNING] * 2, [{0: IN_BARRIER, 1: SLEEPING}])
    watchdog = StallWatchdog(group, stall_timeout=10.0, stall_notice=None)

    verdict, when = run_until(watchdog, 0.0, 30.0)

    assert 10.0 <= when < 10.5
    assert isinstance(verdict.error, WorkerStalledError)
    assert verdict.error.ranks == (1,) and verdict.blamed == (1,)
    assert verdict.reason == "stall_timeout expired" and verdict.restartable
    assert "rank 1 is where the job is stuck" in str(verdict.error)
    assert "most likely held up by rank 1" in str(verdict.error)
    assert group.samples >= 2  # the stacks were compared before the job was declared stalled


def test_ranks_that_all_sleep_are_all_named():
    group = FakeGroup([RankStatus.RUNNING] * 2, [{0: SLEEPING, 1: SLEEPING}])
    verdict, _ = run_until(StallWatchdog(group, 4.0, None), 0.0, 10.0)
    assert verdict.error.ranks == (0, 1)


def test_a_rank_polling_in_the_exchange_is_still_waiting():
    polls = [{0: in_exchange(380 + n % 3), 1: SLEEPING} for n in range(50)]
    group = FakeGroup([RankStatus.RUNNING] * 2, polls)
    verdict, when = run_until(StallWatchdog(group, 4.0, None), 0.0, 10.0)
    assert verdict is not None and when < 4.5
    assert verdict.error.ranks == (1,)


def test_a_stack_that_moves_is_progress():
    walking = [{0: IN_BARRIER, 1: stack(frame(USER, 20 + n, "train"))} for n in range(200)]
    group = FakeGroup([RankStatus.RUNNING] * 2, walking)
    verdict, _ = run_until(StallWatchdog(group, 4.0, None), 0.0, 30.0)
    assert verdict is None
    assert group.handles[1].last_alive > 20.0  # each sample that moved was a sign of life


def test_a_move_before_the_quiet_spell_does_not_count():
    # Two samples, then progress resets the spell; the next sample differs from the one taken
    # before the spell, which proves nothing about the spell: the stall still comes on time.
    stacks = [{0: SLEEPING}, {0: SLEEPING}, {0: stack(frame(USER, 99, "train"))}]
    group = FakeGroup([RankStatus.RUNNING], stacks)
    watchdog = StallWatchdog(group, 4.0, None)
    assert run_until(watchdog, 0.0, 2.0)[0] is None
    group.handles[0].last_alive = 2.0  # output arrived
    verdict, when = run_until(watchdog, 2.0, 20.0)
    assert 6.0 <= when < 6.5


def test_the_notice_comes_once_per_quiet_spell_and_stops_nothing():
    group = FakeGroup([RankStatus.RUNNING] * 2, [{0: IN_BARRIER, 1: SLEEPING}])
    watchdog = StallWatchdog(group, stall_timeout=None, stall_notice=2.0)

    assert run_until(watchdog, 0.0, 10.0)[0] is None
    quiet = [e for e in group.events if isinstance(e, RankQuiet)]
    assert [e.rank for e in quiet] == [0, 1]
    assert quiet[1].where.startswith("in train (")
    assert len(group.sink.notices) == 1
    assert "no rank has made progress for 2 s" in group.sink.notices[0]
    assert "rank 1 is where the job is stuck" in group.sink.notices[0]
    assert "stall_timeout=None: nothing will stop it" in group.sink.notices[0]

    group.handles[0].last_alive = 10.0  # a sign of life ends the spell; a new one is noticed
    run_until(watchdog, 10.0, 13.0)
    assert len(group.sink.notices) == 2


def test_no_limits_means_no_stack_samples():
    group = FakeGroup([RankStatus.RUNNING], [{0: SLEEPING}])
    assert run_until(StallWatchdog(group, None, None), 0.0, 100.0, step=1.0)[0] is None
    assert group.samples == 0


def test_a_job_with_nothing_left_to_run_is_not_stalled():
    group = FakeGroup([RankStatus.FINISHED, RankStatus.FAILED], [{}])
    assert run_until(StallWatchdog(group, 1.0, 1.0), 0.0, 5.0)[0] is None


def test_the_timeout_watchdog_blames_the_rank_that_held_the_others_up():
    group = FakeGroup([RankStatus.RUNNING] * 2, [{0: IN_BARRIER, 1: SLEEPING}])
    watchdog = TimeoutWatchdog(group, deadline=5.0)
    verdict, when = run_until(watchdog, 0.0, 10.0)
    assert when == 5.0
    assert type(verdict.error) is LaunchTimeoutError
    assert verdict.blamed == (1,) and not verdict.restartable
    assert TimeoutWatchdog(group, None).check(1e9) is None


def test_a_rank_that_returned_while_the_others_wait_is_a_deadlock_after_two_samples():
    group = FakeGroup([RankStatus.FINISHED, RankStatus.RUNNING], [{1: IN_BARRIER}])
    group.handles[0].finished_at = 1.0
    verdict, when = run_until(DeadlockWatchdog(group, after=3.0), 0.0, 20.0)
    assert isinstance(verdict.error, DeadlockError)
    assert verdict.error.returned == (0,) and verdict.error.ranks == (1,)
    assert when == pytest.approx(4.0 + DEADLOCK_RECHECK)


def test_waiting_ranks_that_move_on_are_not_deadlocked():
    other_place = stack(
        frame(
            "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
            4800,
            "barrier",
        ),
        frame(USER, 40, "train"),
    )
    group = FakeGroup(
        [RankStatus.FINISHED, RankStatus.RUNNING], [{1: IN_BARRIER}, {1: other_place}] * 20
    )
    group.handles[0].finished_at = 0.0
    group._stacks = [{1: IN_BARRIER} if n % 2 else {1: other_place} for n in range(40)]
    assert run_until(DeadlockWatchdog(group, after=1.0), 0.0, 20.0)[0] is None


# -- the worker group, over real pipes ------------------------------------------------------------


class FakeProcess:
    """Stands in for a ``multiprocessing.Process``: a pipe's read end is its sentinel."""

    def __init__(self) -> None:
        self.sentinel, self._alive = os.pipe()
        self.exitcode: int | None = None
        self.pid = os.getpid()

    def exit(self, code: int) -> None:
        self.exitcode = code
        os.close(self._alive)

    def join(self, timeout: float | None = None) -> None:
        pass


def fake_worker(rank: int):
    ctx = multiprocessing.get_context("fork")
    events_r, events_w = ctx.Pipe(duplex=False)
    out_r, out_w = ctx.Pipe(duplex=False)
    err_r, err_w = ctx.Pipe(duplex=False)
    handle = WorkerHandle(
        rank=rank,
        local_rank=rank,
        process=FakeProcess(),
        events=events_r,
        streams={out_r: LineSplitter(rank, "stdout"), err_r: LineSplitter(rank, "stderr")},
    )
    return handle, events_w, out_w, err_w


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Sink:
    lines: list[str] = field(default_factory=list)

    def write(self, line: OutputLine) -> None:
        self.lines.append(line.text)


def test_the_group_reads_events_and_output_and_keeps_the_status():
    handle, events, out, err = fake_worker(0)
    clock, sink, seen = Clock(), Sink(), []
    group = WorkerGroup([handle], sink, (seen.append,), clock)

    events.send(WorkerStarted(0, 4242, 0.0))
    group.pump(1.0)
    assert handle.status is RankStatus.RUNNING and handle.pid == 4242
    assert handle.last_alive == 100.0

    clock.now = 105.0
    os.write(out.fileno(), b"step 1\n")
    group.pump(1.0)
    assert sink.lines == ["step 1"] and handle.last_alive == 105.0

    clock.now = 110.0
    group.apply(handle, WorkerStopped(0, "timeout expired"))
    events.send(WorkerFailed.from_exception(0, KeyboardInterrupt("stopped")))
    group.pump(1.0)
    assert handle.status is RankStatus.STOPPED and handle.failed is None
    handle.process.exit(1)
    group.pump(1.0)
    assert handle.exitcode == 1 and handle.status is RankStatus.STOPPED
    assert [type(e).__name__ for e in seen] == [
        "WorkerStarted",
        "OutputLine",
        "WorkerStopped",
        "WorkerFailed",
        "WorkerExited",
    ]
    handle.close()
    for conn in (events, out, err):
        conn.close()


def test_a_stack_dump_is_not_output_and_not_a_sign_of_life():
    handle, events, out, err = fake_worker(0)
    clock, sink = Clock(), Sink()
    group = WorkerGroup([handle], sink, (), clock)
    handle.status, handle.last_alive = RankStatus.RUNNING, 50.0

    handle.capture = []
    dump = stack(frame(USER, 9, "train")) + "\n\n"
    os.write(err.fileno(), dump.encode())
    os.write(err.fileno(), b"a warning printed meanwhile\n")
    os.write(out.fileno(), b"a print meanwhile\n")
    for _ in range(3):
        group.pump(0.2)

    assert handle.capture[0].startswith("Current thread 0x")
    assert any("in run_worker" in line for line in handle.capture)
    assert sorted(sink.lines) == ["a print meanwhile", "a warning printed meanwhile"]
    assert handle.last_alive == 100.0  # the two real lines were signs of life, the dump not
    handle.close()
    for conn in (events, out, err):
        conn.close()


def test_no_notice_while_a_stack_moves():
    walking = [{0: IN_BARRIER, 1: stack(frame(USER, 20 + n, "train"))} for n in range(400)]
    group = FakeGroup([RankStatus.RUNNING] * 2, walking)
    assert run_until(StallWatchdog(group, None, 2.0), 0.0, 30.0)[0] is None
    assert group.sink.notices == [] and group.events == []
