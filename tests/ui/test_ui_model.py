"""The run model: a pure reducer of launch events into per-rank state and metric series."""

from __future__ import annotations

import math

import pytest

from notebook_launcher.protocol.events import (
    OutputLine,
    SupervisorTick,
    TrackingBatch,
    WorkerExited,
    WorkerFailed,
    WorkerFinished,
    WorkerStarted,
    WorkerStopped,
)
from notebook_launcher.ui.model import MAX_TEXT, RunModel
from notebook_launcher.ui.series import MAX_POINTS, MetricSeries, Series


def started(rank: int) -> WorkerStarted:
    return WorkerStarted(rank=rank, pid=1000 + rank, time=0.0)


def failed(rank: int, message: str = "bad value\nsecond line") -> WorkerFailed:
    return WorkerFailed(rank, "builtins.ValueError", message, "Traceback ...", None, 0.0)


def metrics(rank: int, *records) -> TrackingBatch:
    return TrackingBatch(rank, tuple(records))


def test_ranks_start_in_starting_and_follow_their_lifecycle(clock):
    model = RunModel(3, clock=clock)
    assert [r.state for r in model.ranks] == ["starting"] * 3
    for rank in range(3):
        model.apply(started(rank))
    assert model.counts() == {"running": 3}
    model.apply(WorkerFinished(0, b"", 0.0))
    model.apply(failed(1))
    model.apply(WorkerStopped(2, "rank 1 failed"))
    model.apply(WorkerExited(2, -9))  # the kill that stopped it changes nothing shown
    assert [r.state for r in model.ranks] == ["finished", "failed", "stopped"]
    assert model.ranks[1].error == "ValueError: bad value"
    assert model.ranks[2].stop_reason == "rank 1 failed"
    assert model.outcome == "failed"
    assert model.summary() == "3 ranks: 1 finished, 1 failed, 1 stopped"


def test_a_rank_that_dies_without_a_word_fails_with_its_signal(clock):
    model = RunModel(2, clock=clock)
    model.apply(started(0))
    model.apply(WorkerExited(0, -11))
    assert model.ranks[0].state == "failed"
    assert model.ranks[0].error == "the process died (signal SIGSEGV)"


def test_stopping_never_overrides_a_final_state(clock):
    model = RunModel(2, clock=clock)
    model.apply(WorkerFinished(0, b"", 0.0))
    model.apply(failed(1))
    model.apply(WorkerStopped(0, "stop requested"))
    model.apply(WorkerStopped(1, "stop requested"))
    assert [r.state for r in model.ranks] == ["finished", "failed"]


def test_output_lines_follow_the_output_policy(clock):
    for policy, shown in (("all", [True, True]), ("main", [True, False]), ("none", [False, False])):
        model = RunModel(2, output=policy, clock=clock)
        for rank in range(2):
            model.apply(OutputLine(rank, "stdout", f"hello from {rank}"))
        assert [bool(r.last_line) for r in model.ranks] == shown, policy
        assert all(r.last_alive == clock.now for r in model.ranks)


def test_liveness_comes_from_events_and_the_supervisors_ticks(clock):
    model = RunModel(2, clock=clock)
    model.apply(started(0))
    clock.advance(5)
    model.apply(SupervisorTick(clock.now, ((0, clock.now - 1), (1, clock.now - 2))))
    assert model.ranks[0].last_alive == clock.now - 1
    assert model.ranks[1].last_alive == clock.now - 2
    model.apply(SupervisorTick(clock.now, ((0, 0.0),)))  # older news never goes back in time
    assert model.ranks[0].last_alive == clock.now - 1


def test_metrics_keep_every_value_per_rank_and_the_mean_min_max_across_ranks(clock):
    model = RunModel(2, clock=clock)
    for step in range(10):
        model.apply(metrics(0, (step, {"loss": float(step)})))
        model.apply(metrics(1, (step, {"loss": float(step) + 2})))
    model.finish()
    loss = model.metrics["loss"]
    assert loss.logged == 20
    assert loss.per_rank[0].points() == [(s, float(s)) for s in range(10)]
    assert loss.mean.points() == [(s, s + 1.0) for s in range(10)]
    assert loss.low.points() == [(s, float(s)) for s in range(10)]
    assert loss.high.points() == [(s, s + 2.0) for s in range(10)]
    assert model.ranks[0].step == 9 and model.ranks[0].logged == 10


def test_a_step_is_final_across_ranks_once_every_rank_has_passed_it(clock):
    series = MetricSeries("loss", num_processes=2)
    series.add(0, 0, 1.0)
    series.add(0, 1, 1.0)
    series.add(1, 0, 3.0)  # rank 1 caught up with step 0: its mean is final
    assert series.mean.points() == [(0, 2.0)]
    series.add(1, 1, 5.0)
    assert series.mean.points() == [(0, 2.0), (1, 3.0)]


def test_a_metric_only_some_ranks_log_is_final_after_a_grace_period_or_their_end(clock):
    series = MetricSeries("lr", num_processes=3, grace=2.0)
    series.add(0, 0, 1.0, now=10.0)
    series.add(0, 1, 1.0, now=11.0)
    assert series.mean.points() == []  # ranks 1 and 2 might still log step 0
    series.add(0, 2, 1.0, now=12.5)
    assert series.mean.points() == [(0, 1.0)]  # step 0 waited 2.5 s
    series.retire(1, now=12.5)
    series.retire(2, now=12.5)  # nobody else will log it
    assert series.mean.points() == [(0, 1.0), (1, 1.0), (2, 1.0)]


def test_values_without_a_step_are_numbered_per_rank_and_metric(clock):
    model = RunModel(2, clock=clock)
    for _ in range(3):
        model.apply(metrics(0, (None, {"a": 1.0, "b": 2.0})))
        model.apply(metrics(1, (None, {"a": 3.0})))
    model.finish()
    assert [x for x, _ in model.metrics["a"].per_rank[1].points()] == [0, 1, 2]
    assert model.metrics["a"].mean.points() == [(0, 2.0), (1, 2.0), (2, 2.0)]
    assert model.metrics["b"].mean.points() == [(0, 2.0), (1, 2.0), (2, 2.0)]


def test_non_finite_values_are_kept_per_rank_but_left_out_of_the_mean(clock):
    model = RunModel(2, clock=clock)
    model.apply(metrics(0, (0, {"loss": math.nan})))
    model.apply(metrics(1, (0, {"loss": 4.0})))
    model.finish()
    assert model.metrics["loss"].mean.points() == [(0, 4.0)]
    assert math.isnan(model.metrics["loss"].per_rank[0].points()[0][1])


@pytest.mark.parametrize("count", [1, 2, MAX_POINTS, MAX_POINTS + 1, 10_000, 123_457])
def test_a_series_keeps_at_most_cap_points_evenly_with_the_first_and_the_last(count):
    series = Series()
    for i in range(count):
        series.add(i, float(i))
    points = series.points()
    assert len(points) <= MAX_POINTS + 1
    assert len(points) == len(series)
    assert points[0] == (0, 0.0)
    assert points[-1] == (count - 1, float(count - 1))
    gaps = {b[0] - a[0] for a, b in zip(points[:-2], points[1:-1], strict=True)}
    assert len(gaps) <= 1  # evenly thinned (only the latest point may sit closer)
    if count > MAX_POINTS:
        assert len(points) >= MAX_POINTS // 2


def test_progress_gives_done_total_and_a_rate(clock):
    model = RunModel(1, clock=clock)
    model.apply(started(0))
    model.apply(TrackingBatch(0, progress=("train", 10, 100, 1.0)))
    assert (model.ranks[0].desc, model.ranks[0].done, model.ranks[0].total) == ("train", 10, 100)
    assert model.ranks[0].rate == pytest.approx(10.0)
    model.apply(TrackingBatch(0, progress=("train", 30, 100, 2.0)))
    assert 10.0 < model.ranks[0].rate < 20.0  # smoothed towards 20 it/s
    model.apply(TrackingBatch(0, progress=("eval", 5, 10, 0.5)))  # a new bar starts over
    assert model.ranks[0].rate == pytest.approx(10.0)


def test_without_a_progress_bar_the_rate_is_steps_per_second(clock):
    model = RunModel(1, clock=clock)
    model.apply(metrics(0, (0, {"loss": 1.0})))
    clock.advance(2.0)
    model.apply(metrics(0, (100, {"loss": 1.0})))
    assert model.ranks[0].rate == pytest.approx(50.0)


def test_status_memory_and_long_texts(clock):
    model = RunModel(1, clock=clock)
    model.apply(TrackingBatch(0, status="evaluating" * 100, memory=3 << 30))
    assert len(model.ranks[0].status) == MAX_TEXT
    assert model.ranks[0].memory == 3 << 30


def test_events_of_unknown_kinds_are_ignored(clock):
    model = RunModel(1, clock=clock)
    version = model.version
    model.apply(object())
    model.apply(WorkerStarted(-1, 1, 0.0))
    assert model.version == version


def test_on_another_node_rows_are_that_nodes_ranks(clock):
    model = RunModel(2, clock=clock, first_rank=4)
    assert [state.rank for state in model.ranks] == [4, 5]
    model.apply(started(5))
    model.apply(metrics(5, (0, {"loss": 1.0})))
    assert [state.state for state in model.ranks] == ["starting", "running"]
    assert list(model.metrics["loss"].per_rank) == [5]
    model.apply(started(2))  # a rendezvous that numbered the node otherwise: by local rank
    assert [state.rank for state in model.ranks] == [2, 5]


def test_a_restarted_rank_runs_again_with_its_error_cleared(clock):
    model = RunModel(1, clock=clock)
    model.apply(started(0))
    model.apply(failed(0))
    model.apply(started(0))
    assert model.ranks[0].state == "running" and model.ranks[0].error == ""


@pytest.mark.parametrize(
    ("num_processes", "output"), [(0, "all"), (True, "all"), ("2", "all"), (2, "some")]
)
def test_bad_arguments_are_refused_by_name(num_processes, output):
    with pytest.raises(ValueError, match="num_processes=|output="):
        RunModel(num_processes, output=output)
