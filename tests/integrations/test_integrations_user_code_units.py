"""Code users bring, piece by piece: rich consoles and progress, tqdm bars, Lightning's Trainer
logger and notebook strategies, library rank labels, and a metric logged once."""

from __future__ import annotations

import io
import re
import sys

import pytest
from helpers.channel import pose_as_worker

import notebook_launcher.live as tracking
from notebook_launcher.integrations import _launched_strategy, hooks
from notebook_launcher.integrations import rich as rich_integration
from notebook_launcher.integrations import tqdm as tqdm_integration
from notebook_launcher.launch.supervision.output import OutputSink, without_own_label
from notebook_launcher.protocol.events import OutputLine, TrackingBatch, WorkerStarted
from notebook_launcher.ui import RunModel
from notebook_launcher.ui.charts import metrics_html


@pytest.fixture
def worker(monkeypatch):
    """This process poses as rank 0 of a launch; every hook set up is undone afterwards."""
    yield from pose_as_worker(monkeypatch)
    hooks.undo()


# -- rank labels -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rank", "shown"),
    [
        ("[rank0]: Traceback (most recent call last):", 0, "Traceback (most recent call last):"),
        ("[rank0]:   File 'x.py', line 1", 0, "  File 'x.py', line 1"),
        ("[rank1]:[W1127 01:02:03 ProcessGroupGloo.cpp:1] warned", 1, "[W1127 01:02:03 Pro"),
        ("[rank: 3] Seed set to 42", 3, "Seed set to 42"),
        ("[rank12]: twelve", 12, "twelve"),
        ("[rank1]: another rank's label stays", 0, "[rank1]: another rank's"),
        ("[rank: 1] another rank's label stays", 0, "[rank: 1] another rank's"),
        ("[rank0] a label without a colon is the user's", 0, "[rank0] a label without"),
        ("no label", 0, "no label"),
    ],
)
def test_a_library_label_of_the_lines_own_rank_is_dropped(text, rank, shown):
    assert without_own_label(text, rank).startswith(shown)


def test_the_cell_shows_one_label_and_the_tail_keeps_it_once():
    out = io.StringIO()
    sink = OutputSink("all", lambda rank: f"[rank{rank}] ", stdout=out, stderr=out)
    sink.write(OutputLine(1, "stderr", "[rank1]: ValueError: boom"))
    sink.write(OutputLine(1, "stdout", "[rank: 1] Seed set to 7"))
    sink.flush()  # the worker group flushes once it has handled what it read
    assert out.getvalue().splitlines() == ["[rank1] ValueError: boom", "[rank1] Seed set to 7"]
    assert sink.tail(1) == ("[rank1] ValueError: boom", "[rank1] Seed set to 7")


def test_a_prefix_without_the_rank_keeps_the_librarys_label():
    out = io.StringIO()
    sink = OutputSink("all", lambda rank: "[node0] ", stdout=out, stderr=out)
    sink.write(OutputLine(1, "stderr", "[rank1]: ValueError: boom"))
    sink.flush()
    assert out.getvalue() == "[node0] [rank1]: ValueError: boom\n"


# -- charts ------------------------------------------------------------------------------------


def test_a_metric_logged_once_draws_a_visible_point_per_rank_and_for_the_mean():
    model = RunModel(2, clock=lambda: 0.0)
    for rank in (0, 1):
        model.apply(WorkerStarted(rank, 100 + rank, 0.0))
        model.apply(TrackingBatch(rank, metrics=((0, {"accuracy": 0.5 + rank / 10}),)))
    model.apply(TrackingBatch(0, metrics=((0, {"loss": 2.0}), (1, {"loss": 1.0}))))
    model.finish()
    page = metrics_html(model)
    accuracy, loss = re.findall(r"<svg.*?</svg>", page)
    assert 'data-metric="accuracy"' in accuracy and 'data-metric="loss"' in loss
    marks = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="([\d.]+)" fill="([^"]+)"', accuracy)
    assert len(marks) == 3  # rank 0, rank 1 and the mean
    assert all(float(r) >= 2 for _, _, r, _ in marks)
    assert {fill for *_, fill in marks} >= {"currentColor"}
    assert "<circle" not in loss  # two points: a line, as before
    # the standalone image kept in the cell marks it too
    static = metrics_html(model, static=True)
    images = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', static)
    import base64

    assert "<circle" in base64.b64decode(images[0]).decode()


# -- Lightning ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "runs_as"),
    [
        ("ddp_notebook", "ddp"),
        ("ddp_fork", "ddp"),
        ("ddp_notebook_find_unused_parameters_true", "ddp_find_unused_parameters_true"),
        ("ddp_fork_find_unused_parameters_false", "ddp_find_unused_parameters_false"),
        ("ddp", "ddp"),
        ("ddp_spawn", "ddp_spawn"),
        ("auto", "auto"),
    ],
)
def test_forking_strategies_run_as_ddp_in_a_launched_worker(strategy, runs_as):
    assert _launched_strategy({"strategy": strategy, "devices": 2}) == {
        "strategy": runs_as,
        "devices": 2,
    }
    marker = object()
    assert _launched_strategy({"strategy": marker})["strategy"] is marker
    assert _launched_strategy({}) == {}


def test_trainer_logger_charts_numbers_without_the_epoch_and_adds_no_folder(worker):
    import torch

    from notebook_launcher.integrations.lightning_trainer import NotebookTrainerLogger

    logger = NotebookTrainerLogger("/tmp/root")
    assert (logger.name, logger.version, logger.save_dir) == ("", "", "/tmp/root")
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"train_loss": torch.tensor(0.5), "epoch": 0.0, "tag": "x"}, step=3)
    logger.finalize("success")
    tracking.flush()
    assert worker.records() == [(3, {"train_loss": 0.5})]
    assert logger.hyperparams == {"lr": 0.1}
    assert any(batch.status == "success" for batch in worker.batches())
    with pytest.raises(TypeError, match="root_dir=3 is not valid"):
        NotebookTrainerLogger(3)


# -- rich --------------------------------------------------------------------------------------


def test_consoles_on_the_worker_streams_write_plain_lines(worker, monkeypatch):
    import rich.console

    monkeypatch.setenv("FORCE_COLOR", "1")  # as a Jupyter kernel sets it
    before = rich.console.Console(force_jupyter=True)  # made in the kernel, before the fork
    rich_integration.plain_consoles(rich.console)
    after = rich.console.Console()
    for console in (before, after):
        assert not console.is_jupyter and not console.is_terminal
        assert console.color_system is None
        with console.capture() as captured:
            console.print("[bold red]plain[/bold red] text")
        assert captured.get() == "plain text\n"
    # a console with a file of its own keeps what it was asked for
    own = rich.console.Console(file=io.StringIO(), force_terminal=True, color_system="standard")
    own.print("[bold]styled[/bold]")
    assert "\x1b[" in own.file.getvalue()
    hooks.undo()
    assert rich.console.Console(force_jupyter=True).is_jupyter  # put back


def test_a_rich_progress_fills_the_progress_column(worker):
    import rich.console
    import rich.progress

    rich_integration.progress_in_panel(rich.progress)
    console = rich.console.Console(file=io.StringIO())
    with rich.progress.Progress(console=console) as bar:
        first = bar.add_task("[bold]epoch 1", total=4)
        bar.update(first, advance=3)
        tracking._tracker.send()
        second = bar.add_task("evaluating", total=2)
        bar.update(second, advance=1)
        tracking._tracker.send()
        bar.update(second, advance=1)
        tracking._tracker.send()
    tracking.flush()
    shown = [batch.progress[:3] for batch in worker.batches() if batch.progress]
    assert shown[:2] == [("epoch 1", 3, 4), ("evaluating", 1, 2)]
    assert shown[2] == ("epoch 1", 3, 4)  # evaluation done: back to the running task


# -- tqdm --------------------------------------------------------------------------------------


def test_every_text_bar_fills_the_progress_column_and_a_nested_one_hands_it_back(worker):
    import tqdm.std

    tqdm_integration.show_in_panel(tqdm.std)
    out = io.StringIO()
    outer = tqdm.std.tqdm(total=5, desc="epoch", file=out)
    outer.update(2)
    tracking._tracker.send()
    for _ in tqdm.std.tqdm(range(3), desc="eval", file=out):
        pass
    tracking._tracker.send()
    outer.close()
    tracking.flush()
    shown = [batch.progress[:3] for batch in worker.batches() if batch.progress]
    assert shown == [("epoch", 2, 5)] * 3  # before, after the nested bar, and closed
    explicit = tracking.Progress(total=2, desc="mine")  # not run under a launch: no tracker
    assert explicit.total == 2
    assert sys.modules["tqdm.std"].tqdm.__init__.__wrapped__ is not None
