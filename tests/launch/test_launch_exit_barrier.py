"""The exit barrier: a rank that returned waits for every rank of the job before it destroys the
process group, unless every rank is known to be through the group's set-up, so a slower peer still
setting the group up is never cut off, and a rank that fails is reported as promptly as ever."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
import torch
import torch.distributed as dist
from helpers.processtree import live_descendants

from notebook_launcher import PartialState, WorkersFailedError
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.backends import shared_memory
from notebook_launcher.ops import reduce

LAUNCHES = 20  # without the barrier about a third of these launches failed on a 2-core machine
GENEROUS = 60.0  # seconds: far above a prompt failure, far below the barrier's 300 s bound
PEER_WORK = 2.0  # seconds the slower rank computes after the fast one returned


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def returns_right_after_joining():
    # The peers run at a low priority, so on a busy machine rank 0 is through gloo's set-up
    # (and, without the barrier, gone) while they still connect to one another.
    if int(os.environ["RANK"]) != 0:
        os.nice(10)
    state = PartialState()
    if state.process_index != 0:
        _busy(0.2)
    return state.process_index


def returns_while_peer_computes(joins_with):
    if joins_with == "PartialState":  # the package's state marks the rank as connected
        PartialState()
        reduce(torch.ones(4))  # both ranks: the shared-memory exchange (or gloo) is used once
    else:  # user code makes the group: nobody marks it, so a rank that is done waits
        dist.init_process_group("gloo")
        dist.all_reduce(torch.ones(4))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    pids = [None] * world_size
    dist.all_gather_object(pids, os.getpid())
    if rank == 0:
        return "returned"
    _busy(PEER_WORK)  # computes, in no collective: not a deadlock
    return _running(pids[0])


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def returns_while_peer_fails():
    state = PartialState()
    if state.process_index == 0:
        return "returned"
    time.sleep(1.0)
    raise ValueError("rank 1 gives up")


def returns_while_peer_dies():
    state = PartialState()
    if state.process_index == 0:
        return "returned"
    time.sleep(1.0)
    os._exit(3)  # never marks itself done: rank 0 waits until the launcher stops it


def joins_alone():
    return PartialState().num_processes


def destroys_the_group_itself():
    state = PartialState()
    dist.destroy_process_group()
    return state.process_index


def _hog_the_cpus() -> list[subprocess.Popen]:
    cores = len(os.sched_getaffinity(0))
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]


def _stop(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def test_a_rank_that_returns_right_after_joining_does_not_break_a_slower_peers_set_up():
    hogs = _hog_the_cpus()
    failures = []
    try:
        for _ in range(LAUNCHES):
            try:
                result = launch(
                    returns_right_after_joining, num_processes=3, ui="none", timeout=120
                )
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                continue
            assert result.values == [0, 1, 2]
    finally:
        _stop(hogs)
    assert not failures, f"{len(failures)} of {LAUNCHES} launches failed: {failures}"


@pytest.mark.parametrize(
    ("joins_with", "exchange", "waited"),
    [
        ("PartialState", "shared memory", False),
        ("PartialState", "gloo", False),
        ("init_process_group", "gloo", True),
        ("PartialState, gloo connecting lazily", "gloo", True),
    ],
)
def test_a_rank_that_returned_waits_only_for_a_peer_not_known_to_be_connected(
    monkeypatch, joins_with, exchange, waited
):
    if joins_with.endswith("lazily"):  # gloo connects at the first collective, not at init
        monkeypatch.setenv("TORCH_GLOO_LAZY_INIT", "1")
        joins_with = "PartialState"
    if exchange == "gloo":
        monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")
    elif not shared_memory.supported():
        pytest.skip("the shared-memory exchange is x86-64 only")
    result = launch(
        returns_while_peer_computes, args=(joins_with,), num_processes=2, ui="none", timeout=120
    )

    # Rank 1 looks for rank 0's process once it has computed: with every rank's group made by
    # PartialState (so marked connected) rank 0 has left, as a plain process would; with a group
    # the function made itself, rank 0 waited for rank 1.
    assert result.values == ["returned", waited]


@pytest.mark.parametrize(
    ("function", "error", "match"),
    [
        (returns_while_peer_fails, ValueError, "rank 1 gives up"),
        (returns_while_peer_dies, WorkersFailedError, "exit code 3"),
    ],
)
def test_a_rank_that_returned_does_not_hold_up_a_failing_peer(capsys, function, error, match):
    started = time.monotonic()
    with pytest.raises(error, match=match):
        launch(function, num_processes=2, ui="none", timeout=120)
    elapsed = time.monotonic() - started

    assert elapsed < GENEROUS
    assert not live_descendants()
    # Rank 0, done or stopped while it waited for rank 1, exits without a word.
    shown = capsys.readouterr()
    rank0 = [line for line in (shown.out + shown.err).splitlines() if line.startswith("[rank0]")]
    assert not any("Traceback" in line or "Interrupt" in line for line in rank0), rank0


def test_one_rank_has_no_one_to_wait_for():
    result = launch(joins_alone, num_processes=1, ui="none", timeout=60)

    assert result.values == [1]


def test_a_group_the_function_destroyed_itself_has_no_barrier():
    result = launch(destroys_the_group_itself, num_processes=2, ui="none", timeout=60)

    assert result.values == [0, 1]
