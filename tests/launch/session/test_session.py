"""Sessions with real worker processes and a real gloo process group: calls, namespaces, failures
that leave the session usable, ranks that die, interrupts, timeouts, stalls, and no leftovers."""

from __future__ import annotations

import glob
import os
import signal
import threading
import time

import psutil
import pytest
import torch
from helpers.processtree import live_descendants

from notebook_launcher import (
    LaunchBusyError,
    LaunchTimeoutError,
    PartialState,
    Session,
    SessionBrokenError,
    SessionClosedError,
    WorkerStalledError,
    notebook_launcher,
)

SETUP = "import os, time, torch\nimport torch.distributed as dist\nfrom notebook_launcher import PartialState\nrank = PartialState().process_index\n"


def workers() -> list[psutil.Process]:
    """This process's live children but the helpers that live as long as it does."""
    return live_descendants()


def shm_files() -> set[str]:
    return set(glob.glob(f"/dev/shm/*{os.getpid()}*"))


@pytest.fixture
def session():
    before = shm_files()
    with Session(num_processes=2, ui="none", stall_notice=None) as opened:
        opened.exec(SETUP)
        yield opened
    assert opened.state == "closed"
    deadline = time.monotonic() + 5
    while workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers(), f"processes left after close: {workers()}"
    assert shm_files() <= before


def all_reduced(value: float) -> float:
    PartialState()  # forms the group in a launch; a session's is formed already
    tensor = torch.tensor([value])
    torch.distributed.all_reduce(tensor)
    return tensor.item()


def test_state_and_the_process_group_persist_across_calls(session):
    assert session.state == "alive"
    assert "alive" in repr(session) and "2 processes" in repr(session)
    assert session.exec("weights = torch.full((2,), float(rank))").values == [None, None]
    assert session.exec("weights.sum().item()").values == [0.0, 2.0]
    session.exec("weights += 1")
    pulled = session.pull("weights")
    assert [t.tolist() for t in pulled] == [[1.0, 1.0], [2.0, 2.0]]
    # The group formed at start-up serves every call; no process was started for them.
    pids = sorted(p.pid for p in workers())
    assert session.run(all_reduced, 1.5).values == [3.0, 3.0]
    assert (
        session.exec("dist.get_world_size(), PartialState().num_processes").values == [(2, 2)] * 2
    )
    assert sorted(p.pid for p in workers()) == pids


def test_run_passes_arguments_and_returns_every_ranks_value(session):
    def shifted(base, *, by):
        return base + by + PartialState().process_index

    result = session.run(shifted, 10, by=5)
    assert result.values == [15, 16]
    assert result.main == 15 and list(result) == [15, 16]


def test_push_binds_names_on_every_rank_and_pull_reads_them(session):
    session.push(lr=0.5, table={"a": [1, 2]})
    assert session.exec("lr * (rank + 1), table['a'][rank]").values == [(0.5, 1), (1.0, 2)]
    session.exec("table['a'].append(rank)")
    assert session.pull("table") == [{"a": [1, 2, 0]}, {"a": [1, 2, 1]}]


def test_output_is_labelled_by_rank(session, capfd):
    session.exec("print('hello from', rank)")
    out = capfd.readouterr().out
    assert "[rank0] hello from 0" in out and "[rank1] hello from 1" in out


def test_an_error_on_one_rank_raises_its_type_naming_the_rank_and_keeps_every_namespace(session):
    session.exec("kept = [rank] * 3")
    with pytest.raises(ValueError, match="bad batch on rank 1") as info:
        session.exec(
            # Rank 1 raises once rank 0 had a second to reach the barrier (the test is about a
            # rank waiting in a collective; a rank stopped before it needs no new group).
            "if rank == 1:\n    __import__('time').sleep(1.0)\n"
            "    raise ValueError('bad batch on rank 1')\nelse:\n    dist.barrier()\n",
            filename="<my cell>",
        )
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Raised on rank 1" in notes and "stopped on rank 0" in notes
    assert "<my cell>" in str(info.value.__cause__)  # the worker's traceback names the code
    # Rank 0 waited in a collective for rank 1: released, and the group formed again.
    assert "formed again" in notes
    assert session.state == "alive"
    assert session.exec("kept").values == [[0, 0, 0], [1, 1, 1]]
    assert session.run(all_reduced, 1.0).values == [2.0, 2.0]


def test_a_failure_outside_collectives_keeps_the_process_group(session):
    group_before = session.exec("id(dist.group.WORLD)").values
    with pytest.raises(KeyError) as info:
        session.exec("{}['missing'] if rank == 0 else None")
    assert "formed again" not in "\n".join(getattr(info.value, "__notes__", []))
    assert session.exec("id(dist.group.WORLD)").values == group_before
    assert session.run(all_reduced, 2.0).values == [4.0, 4.0]


def test_library_collectives_work_after_the_group_is_formed_again(session):
    session.exec("from notebook_launcher import gather, reduce")
    assert session.exec("reduce(torch.tensor([1.0 + rank]), 'sum').item()").values == [3.0, 3.0]
    with pytest.raises(RuntimeError):
        session.exec(
            "if rank == 0:\n    raise RuntimeError('x')\nelse:\n    reduce(torch.ones(1))\n"
        )
    assert session.exec("gather(torch.tensor([rank])).tolist()").values == [[0, 1], [0, 1]]


def test_an_interrupt_stops_the_call_on_every_rank_and_the_session_stays_usable(session):
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt, match="still usable"):
            session.exec("if rank == 1:\n    time.sleep(60)\nelse:\n    dist.barrier()\n")
    finally:
        timer.cancel()
    assert session.state == "alive"
    assert session.run(all_reduced, 1.0).values == [2.0, 2.0]


def test_a_call_timeout_stops_the_call_and_keeps_the_session(session):
    with pytest.raises(LaunchTimeoutError) as info:
        session.exec("time.sleep(60)", timeout=1.5)
    assert str(info.value).startswith("the call exceeded its timeout; it was stopped on every rank")
    assert "still usable" in "\n".join(info.value.__notes__)
    assert session.exec("rank").values == [0, 1]


def test_a_stall_stops_the_call_and_names_the_rank_that_held_the_others_up():
    with Session(num_processes=2, ui="none", stall_timeout=3, stall_notice=None) as session:
        session.exec(SETUP)
        with pytest.raises(WorkerStalledError, match="rank 1") as info:
            session.exec("if rank == 1:\n    time.sleep(60)\nelse:\n    dist.barrier()\n")
        # Worded for a call: the workers live on.
        assert "The call was stopped on every rank." in str(info.value)
        assert "All ranks were stopped" not in str(info.value)
        assert info.value.__notes__[-1].startswith("The session is still usable")
        shown = info.value._render_traceback_()
        assert info.value.__notes__[-1] in shown  # IPython shows what the call left too
        assert session.run(all_reduced, 1.0).values == [2.0, 2.0]


def test_a_rank_killed_in_a_collective_breaks_the_session_and_restart_recovers(session):
    with pytest.raises(SessionBrokenError, match="rank 1") as info:
        session.exec(
            "if rank == 1:\n    time.sleep(0.3)\n    os.kill(os.getpid(), 9)\nelse:\n    dist.barrier()\n"
        )
    assert "SIGKILL" in str(info.value.__cause__) or "-9" in str(info.value)
    assert session.state == "broken" and "broken" in repr(session)
    deadline = time.monotonic() + 10  # the surviving rank is stopped (in the background)
    while workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers()
    with pytest.raises(SessionBrokenError, match="restart"):
        session.exec("rank")
    session.restart()
    assert session.state == "alive"
    with pytest.raises(NameError):  # the earlier state is gone, as restart says
        session.exec("rank")
    session.exec(SETUP)
    assert session.exec("rank").values == [0, 1]


def test_a_rank_that_dies_between_calls_is_noticed_without_a_call(session):
    victim = workers()[-1]
    victim.kill()
    deadline = time.monotonic() + 10
    while session.state == "alive" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert session.state == "broken"
    with pytest.raises(SessionBrokenError, match="died"):
        session.run(all_reduced, 1.0)


@pytest.mark.parametrize("when", ["in a call", "between calls"])
def test_a_rank_sent_sigterm_by_someone_else_leaves_and_the_session_says_so(session, when):
    """A scheduler, ``kill`` or a container shutting down asks a rank to end: it leaves (its clean-up
    runs) and the session is broken, naming a SIGTERM the launcher did not send."""
    pid = session.exec("os.getpid()").values[1]
    if when == "in a call":
        with pytest.raises(SessionBrokenError, match="rank 1") as info:
            session.exec(
                "try:\n    if rank == 1:\n        os.kill(os.getpid(), 15)\n    dist.barrier()\n"
                "finally:\n    print('clean-up ran')\n"
            )
        text = str(info.value)
    else:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while session.state == "alive" and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(SessionBrokenError) as info:
            session.exec("rank")
        text = str(info.value)
    assert "SIGTERM the launcher did not send" in text, text
    assert session.state == "broken"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    session.restart()
    session.exec(SETUP)
    assert session.run(all_reduced, 1.0).values == [2.0, 2.0]


def test_one_launch_or_session_at_a_time(session):
    with pytest.raises(LaunchBusyError, match="session of 2 processes.*close"):
        notebook_launcher(all_reduced, args=(1.0,), num_processes=2)
    with pytest.raises(LaunchBusyError):
        Session(num_processes=2)
    assert session.exec("rank").values == [0, 1]


def test_close_is_final_and_idempotent():
    session = Session(num_processes=2, ui="none")
    pids = [p.pid for p in workers()]
    assert len(pids) == 2
    session.close()
    session.close()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    with pytest.raises(SessionClosedError):
        session.exec("1")
    # The kernel is free again: a launch runs.
    assert notebook_launcher(all_reduced, args=(1.0,), num_processes=2, ui="none").values == [
        2.0,
        2.0,
    ]


def test_spawned_workers_run_calls_by_value():
    with Session(num_processes=2, start_method="spawn", ui="none") as session:
        assert session.run(all_reduced, 0.5).values == [1.0, 1.0]
        session.push(scale=3)
        assert session.exec("scale * 2").values == [6, 6]


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: Session(num_processes=0), ValueError, "num_processes"),
        (lambda: Session(num_processes=2, start_timeout=-1), ValueError, "start_timeout"),
        (lambda: Session(num_processes=2, output="loud"), ValueError, "output"),
        (lambda: Session(num_processes=2, max_restarts=1), TypeError, "max_restarts"),
    ],
)
def test_bad_settings_are_refused_before_any_process_starts(make, error, words):
    with pytest.raises(error, match=words):
        make()
    assert not workers()


def test_bad_calls_are_refused_with_what_was_wrong(session):
    with pytest.raises(TypeError, match="callable"):
        session.run(42)
    with pytest.raises(TypeError, match="source must be a str"):
        session.exec(b"1")
    with pytest.raises(SyntaxError):
        session.exec("def broken(:")
    with pytest.raises(ValueError, match="identifier"):
        session.pull("not a name")
    with pytest.raises(NameError, match="nowhere"):
        session.pull("nowhere")
    with pytest.raises(TypeError, match="push"):
        session.push()
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"args\[0\]"):
        session.run(print, lock)
    assert session.exec("rank").values == [0, 1]


TRAINING = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
features = torch.randn(64, 4)
targets = features @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(features, targets), batch_size=8)
accelerator = Accelerator(cpu=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

def epoch():
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        total += loss.item()
    return accelerator.reduce(torch.tensor(total), "mean").item()
"""


@pytest.mark.parametrize("package", ["notebook_launcher", "accelerate"])
def test_an_accelerator_prepared_in_one_call_trains_in_the_next(session, package):
    session.exec(f"from {package} import Accelerator\n" + TRAINING)
    first = session.exec("epoch()").values
    second = session.exec("epoch()").values
    assert first[0] == first[1] and second[0] == second[1]  # reduced over the ranks
    assert second[0] < first[0]  # the model kept training from where it was
    weights = session.exec("[p.detach().clone() for p in model.parameters()]").values
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))  # DDP kept them equal


def test_a_quiet_rank_is_noticed_in_a_call_that_then_goes_on(capfd):
    with Session(num_processes=2, ui="none", stall_notice=1.0, stall_timeout=None) as session:
        session.exec(SETUP)
        capfd.readouterr()
        result = session.exec("if rank == 1:\n    time.sleep(4)\ndist.barrier()\nrank\n")
        assert result.values == [0, 1]  # nothing was stopped
        err = capfd.readouterr().err
        assert "notebook_launcher: no rank has made progress for 1 s" in err
        assert "rank 1 is where the job is stuck. Nothing was stopped" in err
        # The notice is per call: a quiet spell in the next call is noticed again.
        session.exec("if rank == 0:\n    time.sleep(3)\ndist.barrier()\n")
        assert "rank 0 is where the job is stuck" in capfd.readouterr().err
