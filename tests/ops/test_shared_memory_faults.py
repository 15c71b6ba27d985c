"""Faults in shared-memory collectives: a rank killed inside one, ranks making different calls.

A rank killed (SIGKILL) at any moment of a collective is reported within a few seconds: the
launch raises, naming it, whether the launcher sees the process end or the other ranks do (they
watch their peers' processes while they wait). The times printed here are measured; the suite
only bounds them generously (5 s), ``benchmarks/shm_kill.py`` runs 100 trials and reports them
against the 1 s target.

Ranks whose calls differ get the exchange's ValueError, naming what each rank did, on every rank,
before any data is mixed (the object collectives go through the exchange too, and so does the
barrier of ``wait_for_everyone`` once the job's collectives use the exchange).
"""

from __future__ import annotations

import os
import random
import time

import pytest
import torch
from collective_workload import KILL_LINES, kill_trial

from notebook_launcher import PartialState, notebook_launcher, ops, wait_for_everyone
from notebook_launcher.backends import shared_memory

pytestmark = pytest.mark.skipif(
    not shared_memory.supported(), reason="the exchange needs x86-64 Linux with /dev/shm"
)

REPORTED_WITHIN = 5.0  # seconds; measured times are far lower (see the benchmark)


def test_a_rank_killed_at_a_random_moment_is_reported_at_once(tmp_path):
    rng = random.Random(5)
    times = []
    for trial in range(12):
        world = 2 + trial % 2
        killed = kill_trial(str(tmp_path), world, rng, child=trial % 3 == 0)
        times.append(killed.seconds)
        assert f"rank {killed.victim} " in killed.error, killed
        assert killed.seconds < REPORTED_WITHIN, killed
    print(f"kill to exception: min {min(times):.3f} s, max {max(times):.3f} s")


@pytest.mark.parametrize("where", list(KILL_LINES), ids=lambda where: where.replace(" ", "-"))
def test_a_rank_killed_at_each_point_of_a_collective_is_reported_at_once(tmp_path, where):
    # Rank 1 of 3 kills itself as the exchange is about to run the line; its child process
    # keeps its pipes open, so only the other ranks can tell that it is gone.
    killed = kill_trial(str(tmp_path), 3, random.Random(where), KILL_LINES[where], child=True)
    assert killed.victim == 1 and "rank 1 " in killed.error, killed
    assert killed.seconds < REPORTED_WITHIN, killed
    print(f"{where}: {killed.seconds:.3f} s")


# What each rank does (rank 2 as rank 0), and how the exchange describes it. The slots hold 64
# float32 (see mismatched), so 128 elements take two steps.
MISMATCHES = {
    "one 2-slot reduce against two 1-slot reduces": (
        lambda: ops.reduce(torch.ones(128)),
        lambda: [ops.reduce(torch.ones(64)) for _ in range(2)],
        "all_reduce of 128 float32",
        "all_reduce of 64 float32",
    ),
    "a packed dict against its tensors one by one": (
        lambda: ops.reduce({"a": torch.ones(1), "b": torch.ones(1)}),
        lambda: [ops.reduce(torch.ones(1)) for _ in range(2)],
        "all_reduce of 2 float32",
        "all_reduce of 1 float32",
    ),
    "different operations": (
        lambda: ops.reduce(torch.ones(4)),
        lambda: ops.gather(torch.ones(4)),
        "all_reduce of 4 float32",
        "all_gather of 4 float32",
    ),
    "different dtypes": (
        lambda: ops.reduce(torch.ones(4)),
        lambda: ops.reduce(torch.ones(4, dtype=torch.float64)),
        "all_reduce of 4 float32",
        "all_reduce of 4 float64",
    ),
    "different sizes": (
        lambda: ops.gather(torch.ones(4)),
        lambda: ops.gather(torch.ones(5)),
        "all_gather of 4 float32",
        "all_gather of 5 float32",
    ),
    "gather against broadcast": (
        lambda: ops.gather(torch.ones(4)),
        lambda: ops.broadcast(torch.ones(4)),
        "all_gather of 4 float32",
        "broadcast from rank 0 of 4 float32",
    ),
    "broadcasts from different ranks": (
        lambda: ops.broadcast(torch.ones(4), from_process=0),
        lambda: ops.broadcast(torch.ones(4), from_process=1),
        "broadcast from rank 0 of 4 float32",
        "broadcast from rank 1 of 4 float32",
    ),
    "a tensor gather against an object gather": (
        lambda: ops.gather(torch.ones(4)),
        lambda: ops.gather_object(["a", "b"]),
        "all_gather of 4 float32",
        "all_gather_object",
    ),
    "an object broadcast against a tensor reduce": (
        lambda: ops.broadcast_object_list([1, 2]),
        lambda: ops.reduce(torch.ones(2)),
        "broadcast_object_list from rank 0 of 2 objects",
        "all_reduce of 2 float32",
    ),
}


def mismatched(kind):
    from notebook_launcher.backends.cpu import SharedMemoryCommunicator

    state = PartialState()
    SharedMemoryCommunicator.EXCHANGE_BYTES = 256 * 2 * state.num_processes
    ops.reduce(torch.ones(3))  # the exchange is made, the ranks agree so far
    first, second, _, _ = MISMATCHES[kind]
    try:
        (second if state.process_index == 1 else first)()
    except ValueError as error:
        message = str(error)
    else:
        message = None
    # The ranks raised at the same step: the exchange is still usable, and in step.
    after = ops.reduce(torch.full((2,), float(state.process_index)), reduction="sum")
    return message, after


@pytest.mark.parametrize("kind", list(MISMATCHES), ids=lambda kind: kind.replace(" ", "-"))
def test_ranks_making_different_calls_get_the_exchanges_error_on_every_rank(kind):
    world = 3 if "dict" in kind else 2
    _, _, did, other_did = MISMATCHES[kind]
    results = notebook_launcher(mismatched, args=(kind,), num_processes=world, output="none")
    for message, after in results:
        assert message is not None and "the ranks made different calls" in message
        assert f"rank 0: {did};" in message and f"rank 1: {other_did}" in message, message
        if world == 3:
            assert f"rank 2: {did} (" in message, message
        assert torch.equal(after, torch.full((2,), float(sum(range(world)))))


def mismatch_left_alone():
    if PartialState().process_index == 0:
        ops.reduce(torch.ones(4))
    else:
        ops.gather_object("rank 1")


def test_an_uncaught_mismatch_fails_the_launch_with_the_exchanges_error():
    with pytest.raises(ValueError, match="the ranks made different calls") as caught:
        notebook_launcher(mismatch_left_alone, num_processes=2, output="none", timeout=60)
    assert "rank 0: all_reduce of 4 float32; rank 1: all_gather_object" in str(caught.value)


def one_more_collective_on_rank_0():
    ops.reduce(torch.ones(3))
    if PartialState().process_index == 0:
        ops.reduce(torch.ones(3))  # rank 1 has returned: nobody will ever join


def test_a_rank_left_waiting_by_a_rank_that_returned_fails_at_once():
    started = time.monotonic()
    with pytest.raises(Exception, match=r"rank 1 \(pid \d+\) ended while rank 0 waited") as caught:
        notebook_launcher(one_more_collective_on_rank_0, num_processes=2, output="none", timeout=60)
    assert type(caught.value).__name__ == "DistBackendError"
    assert time.monotonic() - started < 30  # not the launch's timeout


# -- barriers -----------------------------------------------------------------------------------

BARRIER = "barrier (wait_for_everyone)"  # how the exchange describes a rank in a barrier
RAISED_WITHIN = 20.0  # seconds for the whole launch; the launch's timeout is 60 s
# What the other rank runs while one waits in a barrier, and how the exchange describes it.
AGAINST_A_BARRIER = {
    "reduce": (lambda: ops.reduce(torch.ones(4)), "all_reduce of 4 float32"),
    "gather": (lambda: ops.gather(torch.ones(4)), "all_gather of 4 float32"),
    "broadcast": (lambda: ops.broadcast(torch.ones(4)), "broadcast from rank 0 of 4 float32"),
}
# The ways into the library's barrier.
BARRIERS = {
    "wait_for_everyone": wait_for_everyone,
    "PartialState": lambda: PartialState().wait_for_everyone(),
}


def barrier_against(kind, barrier_rank):
    ops.reduce(torch.ones(3))  # the exchange is made, the ranks agree so far
    if PartialState().process_index == barrier_rank:
        wait_for_everyone()
    else:
        AGAINST_A_BARRIER[kind][0]()


@pytest.mark.parametrize("barrier_rank", [1, 0], ids=["barrier-on-rank-1", "barrier-on-rank-0"])
@pytest.mark.parametrize("kind", list(AGAINST_A_BARRIER))
def test_a_barrier_against_another_collective_fails_the_launch_at_once(kind, barrier_rank):
    started = time.monotonic()
    with pytest.raises(ValueError, match="the ranks made different calls") as caught:
        notebook_launcher(
            barrier_against, args=(kind, barrier_rank), num_processes=2, output="none", timeout=60
        )
    elapsed = time.monotonic() - started
    print(f"{kind} against a barrier on rank {barrier_rank}: raised after {elapsed:.1f} s")
    did = AGAINST_A_BARRIER[kind][1]
    calls = (did, BARRIER) if barrier_rank == 1 else (BARRIER, did)
    assert f"rank 0: {calls[0]}; rank 1: {calls[1]} (" in str(caught.value)
    assert elapsed < RAISED_WITHIN  # not the launch's timeout


def barrier_against_caught(kind, way):
    state = PartialState()
    ops.reduce(torch.ones(3))
    try:
        if state.process_index == 1:
            BARRIERS[way]()
        else:
            AGAINST_A_BARRIER[kind][0]()
    except ValueError as error:
        message = str(error)
    else:
        message = None
    # Every rank raised at the same step: a barrier and a collective still work afterwards.
    BARRIERS[way]()
    return message, ops.reduce(torch.full((2,), float(state.process_index)), reduction="sum")


@pytest.mark.parametrize("way", list(BARRIERS))
def test_a_barrier_against_another_collective_raises_on_every_rank(way):
    results = notebook_launcher(
        barrier_against_caught, args=("reduce", way), num_processes=2, output="none", timeout=60
    )
    for message, after in results:
        assert message is not None, "a rank did not raise"
        assert f"rank 0: all_reduce of 4 float32; rank 1: {BARRIER} (" in message, message
        assert torch.equal(after, torch.full((2,), 1.0))


def barriers_between_reduces(folder):
    from notebook_launcher.ops.communicator import current

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    wait_for_everyone()  # before any collective: no exchange yet, so gloo's barrier
    total = ops.reduce(torch.ones(2), reduction="sum")
    exchange = current()._exchange
    seen, steps = [], []
    for turn in range(4):
        marker = os.path.join(folder, str(turn))
        if rank == turn % world:  # written before its barrier, read by the others after theirs
            with open(marker, "w"):
                pass
        before = exchange._step if exchange else 0
        list(BARRIERS.values())[turn % 2]()
        steps.append(exchange._step - before if exchange else None)
        seen.append(os.path.exists(marker))
        total = ops.reduce(total, reduction="sum")
    return seen, steps, total


@pytest.mark.parametrize(
    ("world", "exchange"), [(2, True), (3, True), (2, False)], ids=["2", "3", "2-gloo"]
)
def test_matching_barriers_between_reduces_wait_for_everyone(
    tmp_path, monkeypatch, world, exchange
):
    if not exchange:
        monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")  # every collective over gloo
    results = notebook_launcher(
        barriers_between_reduces, args=(str(tmp_path),), num_processes=world, timeout=60
    )
    for seen, steps, total in results:
        assert seen == [True] * 4
        assert steps == ([1] * 4 if exchange else [None] * 4)  # one step of the exchange each
        assert torch.equal(total, torch.full((2,), float(world**5)))
