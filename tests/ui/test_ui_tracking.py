"""The worker-side API: log, progress, set_status — buffered, sent in batches, nothing lost."""

from __future__ import annotations

import os
import time

import pytest
import torch
from helpers.channel import pose_as_worker

import notebook_launcher.live as tracking
from notebook_launcher import log, notebook_launcher, progress, set_status
from notebook_launcher.protocol.events import TrackingBatch


@pytest.fixture
def worker(monkeypatch):
    """This process poses as rank 0 of a launch for the length of the test."""
    yield from pose_as_worker(monkeypatch)


def test_outside_a_launch_every_call_is_a_no_op():
    assert tracking.current_context() is None
    log({"loss": 1.0}, step=3)
    set_status("idle")
    assert list(progress(range(3))) == [0, 1, 2]
    assert tracking._tracker is None


def test_values_are_sent_in_batches_by_a_background_thread(worker):
    for step in range(100):
        log({"loss": step / 100, "lr": 3e-4}, step=step)
    deadline = time.monotonic() + 5
    while len(worker.records()) < 100 and time.monotonic() < deadline:
        time.sleep(0.02)
    records = worker.records()
    assert records == [(s, {"loss": s / 100, "lr": 3e-4}) for s in range(100)]
    assert len(worker.sent) < 20  # batched, not one message per call


def test_flush_sends_everything_left_at_once(worker):
    log({"a": 1}, step=None)
    set_status("saving")
    bar = progress(total=10, desc="epoch")
    bar.update(4)
    tracking.flush()
    last = worker.sent[-1]
    assert isinstance(last, TrackingBatch)
    assert worker.records() == [(None, {"a": 1})]
    assert last.status == "saving"
    assert last.progress[:3] == ("epoch", 4, 10)
    log({"a": 2})  # after the final flush nothing is sent any more
    assert len(worker.records()) == 1


def test_nothing_is_sent_while_nothing_changes(worker):
    with progress(total=3, desc="once") as bar:
        bar.update(3)
    set_status("idle")
    time.sleep(0.5)  # the closed bar and the status go out once
    sent = len(worker.sent)
    assert sent >= 1
    time.sleep(0.5)
    assert len(worker.sent) == sent


def test_tensors_and_numpy_scalars_are_read_as_numbers(worker):
    import numpy as np

    log({"t": torch.tensor(2.5, requires_grad=True), "n": np.float32(1.5), "b": True})
    tracking.flush()
    assert worker.records() == [(None, {"t": 2.5, "n": 1.5, "b": 1.0})]


@pytest.mark.parametrize(
    ("metrics", "step", "error"),
    [
        ([("loss", 1.0)], None, r"metrics=\[\('loss', 1.0\)\] is not valid: expected a dict"),
        ({"loss": 1.0}, "3", r"step='3' is not valid"),
        ({"loss": 1.0}, True, r"step=True is not valid"),
        ({"loss": "low"}, None, r"metrics\['loss'\]='low' is not valid: expected a number"),
        ({"loss": torch.ones(3)}, None, r"metrics\['loss'\]=tensor.* is not valid"),
        ({1: 1.0}, None, r"metric name 1 is not valid"),
    ],
)
def test_bad_input_is_refused_by_name(worker, metrics, step, error):
    with pytest.raises(TypeError, match=error):
        log(metrics, step=step)


def test_progress_wraps_iterables_and_counts_like_tqdm(worker):
    bar = progress(range(5), desc="train")
    assert len(bar) == 5 and bar.total == 5
    assert list(bar) == [0, 1, 2, 3, 4]
    assert bar.n == 5 and bar.closed
    with progress(total=3) as manual:
        manual.update()
        manual.update(2)
    assert manual.snapshot()[1:3] == (3, 3)
    with pytest.raises(TypeError, match="total='x' is not valid"):
        progress(total="x")
    with pytest.raises(ValueError, match="total=-1 is not valid"):
        progress(total=-1)
    with pytest.raises(TypeError, match="rank_zero_only=1 is not valid"):
        progress(range(2), rank_zero_only=1)
    with pytest.raises(TypeError, match="text=3 is not valid"):
        set_status(3)


def test_a_process_a_worker_forks_never_writes_to_its_pipe(worker):
    log({"before": 1.0})
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say
        try:
            log({"child": 1.0})
            tracking.flush()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    tracking.flush()
    assert worker.records() == [(None, {"before": 1.0})]


# -- real launches --------------------------------------------------------------------------------

N = 3000


def log_then_return(n):
    rank = int(os.environ["RANK"])
    for i in range(n):
        log({"value": float(rank * n + i)}, step=i)
        if i % 2:
            log({"unstepped": float(i)})
    return rank


def test_every_metric_four_ranks_log_before_a_normal_exit_is_in_the_final_model():
    for _ in range(3):  # the last batch races the exit: try it a few times
        result = notebook_launcher(log_then_return, args=(N,), num_processes=4, ui="none")
        model = result.panel.model
        value = model.metrics["value"]
        assert value.logged == 4 * N
        assert model.metrics["unstepped"].logged == 4 * (N // 2)
        assert [state.logged for state in model.ranks] == [N + N // 2] * 4
        for rank in range(4):
            assert value.per_rank[rank].points()[-1] == (N - 1, float(rank * N + N - 1))
        assert value.mean.last == (N - 1, (0 + N + 2 * N + 3 * N) / 4 + N - 1)
        assert value.mean.count == N  # every step has its across-rank mean


def small_log(n):
    rank = int(os.environ["RANK"])
    for i in range(n):
        log({"x": float(i * 10 + rank)}, step=i)


def test_every_value_is_kept_exactly_below_the_point_cap():
    model = notebook_launcher(small_log, args=(400,), num_processes=4, ui="none").panel.model
    for rank in range(4):
        assert model.metrics["x"].per_rank[rank].points() == [
            (i, float(i * 10 + rank)) for i in range(400)
        ]


def log_then_fail():
    rank = int(os.environ["RANK"])
    set_status("about to fail")
    for i in range(50):
        log({"loss": 1.0}, step=i)
    if rank == 1:
        raise ValueError("bad batch")
    time.sleep(30)


def test_metrics_logged_before_a_failure_arrive_with_it():
    from notebook_launcher import launch_in_background

    handle = launch_in_background(log_then_fail, num_processes=2, ui="none")
    with pytest.raises(ValueError, match="bad batch"):
        handle.wait(60)
    model = handle.model
    assert model.ranks[1].state == "failed" and model.ranks[1].logged == 50
    assert model.ranks[1].status == "about to fail"
    assert model.ranks[1].error == "ValueError: bad batch"
    assert model.ranks[0].state == "stopped"


def progress_everywhere(everyone):
    for _ in progress(range(20), desc="work", rank_zero_only=not everyone):
        time.sleep(0.005)


@pytest.mark.parametrize("everyone", [False, True])
def test_progress_of_rank_zero_or_of_every_rank(everyone):
    model = notebook_launcher(
        progress_everywhere, args=(everyone,), num_processes=2, ui="none"
    ).panel.model
    assert (model.ranks[0].done, model.ranks[0].total, model.ranks[0].desc) == (20, 20, "work")
    assert model.ranks[1].done == (20 if everyone else None)
    assert model.ranks[0].rate is not None and model.ranks[0].rate > 0
