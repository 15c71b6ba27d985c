"""Many ranks on one screen: alike rows folded, the ranks that differ shown, bars summed up,
charts drawn as a band, and every rank on request."""

from __future__ import annotations

import re

import pytest

from notebook_launcher.protocol.events import (
    OutputLine,
    TrackingBatch,
    WorkerFailed,
    WorkerStarted,
)
from notebook_launcher.ui import RunModel, RunPanel
from notebook_launcher.ui.charts import metrics_html
from notebook_launcher.ui.folding import (
    FOLD_ABOVE,
    MAX_ROWS,
    bar_summaries,
    fold_rows,
    rank_lines_up_to,
    rank_ranges,
)
from notebook_launcher.ui.render import status_html, status_text
from notebook_launcher.ui.widgets import WidgetView

ROW = re.compile(r'<tr class="nl-row[^"]*" data-rank="([\d ]+)" data-state="(\w+)"')


def running(clock, n: int) -> RunModel:
    model = RunModel(n, clock=clock)
    for rank in range(n):
        model.apply(WorkerStarted(rank, 1000 + rank, 0.0))
        model.apply(TrackingBatch(rank, metrics=((12, {"loss": 1.0 + rank / 100}),)))
        model.apply(OutputLine(rank, "stdout", "step 12 done"))
    return model


def rows(page: str) -> list[tuple[str, str]]:
    return ROW.findall(page)


def test_sixty_four_alike_ranks_make_one_row(clock):
    page = status_html(running(clock, 64), clock.now)

    assert rows(page) == [(" ".join(map(str, range(64))), "running")]
    assert ">0-63<" in page and "64 running" in page and "step 12 done" in page


def test_the_ranks_that_differ_keep_rows_of_their_own(clock):
    model = running(clock, 64)
    model.apply(OutputLine(5, "stdout", "rank 5 waits for data"))
    model.apply(WorkerFailed(40, "builtins.ValueError", "bad batch", "", None, 0.0))
    page = status_html(model, clock.now)

    found = rows(page)
    alike = " ".join(str(r) for r in range(64) if r not in (5, 40))
    assert found == [(alike, "running"), ("5", "running"), ("40", "failed")]
    assert ">0-4,6-39,41-63<" in page and "rank 5 waits for data" in page
    assert "ValueError: bad batch" in page
    text = status_text(model, clock.now)
    assert "ranks 0-4,6-39,41-63 running" in text and "rank 40  failed" in text
    assert len(text.splitlines()) == 5  # headline, 3 rows, the loss


def test_rows_stay_bounded_when_every_rank_prints_its_own_line(clock):
    model = running(clock, 64)
    for rank in range(64):
        model.apply(OutputLine(rank, "stdout", f"rank {rank} at sample {rank * 7}"))
        model.apply(TrackingBatch(rank, metrics=((rank % 20, {"loss": 1.0}),)))
    model.apply(WorkerFailed(9, "builtins.ValueError", "bad batch", "", None, 0.0))
    page = status_html(model, clock.now)

    found = rows(page)
    assert len(found) <= MAX_ROWS
    assert [state for _, state in found] == ["running", "failed"]
    assert found[1][0] == "9"
    assert "0–19" in page  # the steps the folded ranks span


def test_ranks_are_grouped_by_node(clock):
    model = RunModel(32, clock=clock)
    for rank in range(32):
        model.apply(WorkerStarted(rank, rank, 0.0, node=f"node{rank // 16}"))
    folded = fold_rows(model.ranks)

    assert [(row.label, row.first.node) for row in folded] == [
        ("0-15", "node0"),
        ("16-31", "node1"),
    ]


def test_up_to_eight_ranks_have_a_row_each_and_every_rank_is_one_keyword_away(clock):
    assert FOLD_ABOVE == 8 and rank_lines_up_to() == 8
    assert len(rows(status_html(running(clock, 8), clock.now))) == 8
    assert len(rows(status_html(running(clock, 64), clock.now, every_rank=True))) == 64


def test_the_threshold_follows_the_environment_and_refuses_nonsense(monkeypatch, clock):
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_RANK_LINES", "64")
    assert len(rows(status_html(running(clock, 64), clock.now))) == 64
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_RANK_LINES", "many")
    with pytest.raises(ValueError, match="NOTEBOOK_LAUNCHER_RANK_LINES='many' is not valid"):
        rank_lines_up_to()


def test_rank_ranges():
    assert rank_ranges([3]) == "3"
    assert rank_ranges(range(8)) == "0-7"
    assert rank_ranges([7, 0, 2, 4, 5, 6]) == "0,2,4-7"


def test_charts_of_many_ranks_draw_the_mean_and_the_band_and_every_line_on_request(clock):
    model = running(clock, 64)
    for rank in range(64):
        model.apply(TrackingBatch(rank, metrics=((13, {"loss": 0.9 + rank / 100}),)))
    model.finish()
    folded = metrics_html(model)
    every = metrics_html(model, every_rank=True)

    assert folded.count("<polyline") == 1 and folded.count("<polygon") == 1  # mean, band
    assert every.count("<polyline") == 65  # a line per rank and the mean
    assert "rank&nbsp;63" in every and "rank&nbsp;63" not in folded
    eight = running(clock, 8)
    eight.finish()
    assert metrics_html(eight).count("<circle") == 9  # one point per rank and the mean


def test_the_final_copy_folds_too_and_keeps_every_rank_under_a_click(clock):
    model = running(clock, 64)
    model.finish()
    page = RunPanel(model).html()
    table, every = page.split('<details class="nl-every-rank"')

    assert len(rows(table)) == 1 and len(rows(every)) == 64
    assert table.count("nl-headline") == 1 and "nl-headline" not in every  # said once
    assert "<script" not in page
    assert '<details class="nl-every-rank"' not in RunPanel(running(clock, 8)).html()
    assert "<details" not in RunPanel(model, every_rank=True).html()
    with pytest.raises(TypeError, match="every_rank='yes' is not valid"):
        RunPanel(model, every_rank="yes")


def test_a_bar_several_ranks_run_shows_the_slowest_and_the_fastest(clock):
    model = running(clock, 4)
    for rank, done in enumerate((3, 9, 5, 9)):
        model.apply(TrackingBatch(rank, progress=("epoch 2", done, 10, 1.0)))
    model.apply(TrackingBatch(0, progress=None))
    summaries = bar_summaries(model.ranks)
    page = status_html(model, clock.now)

    assert [(b.desc, b.slowest.rank, b.fastest.rank, b.count) for b in summaries] == [
        ("epoch 2", 0, 1, 4)
    ]
    bar = re.search(r'<div class="nl-bar"[^>]*>.*?</div>', page)[0]
    assert 'data-desc="epoch 2" data-low="3" data-high="9"' in bar
    assert "slowest rank 0 3/10 · fastest rank 1 9/10" in bar
    assert "width:30.0%" in bar and "width:90.0%" in bar
    for rank in range(4):
        model.apply(TrackingBatch(rank, progress=("epoch 2", 10, 10, 2.0)))
    assert "10/10 on 4 ranks" in status_html(model, clock.now)


def test_a_bar_of_rank_zero_alone_stays_in_its_row(clock):
    model = running(clock, 4)
    model.apply(TrackingBatch(0, progress=("epoch 1", 4, 10, 1.0)))
    assert 'class="nl-bars"' not in status_html(model, clock.now)


def test_the_live_table_of_sixty_four_ranks_stays_small_and_every_rank_opens_in_place(clock, comms):
    model = RunModel(64, clock=clock)
    view = WidgetView(model)
    view.widget  # noqa: B018 (creates the widgets)
    comms.clear()
    for rank in range(64):
        view(WorkerStarted(rank, rank, 0.0))
    for step in range(100):  # 10 s, every rank reporting 10 times a second
        clock.advance(0.1)
        for rank in range(64):
            view(TrackingBatch(rank, metrics=((step, {"loss": 1.0 / (step + 1)}),)))
            view(OutputLine(rank, "stdout", f"step {step} done"))
    status = comms.updates(view.status)
    every = comms.updates(view.every)

    assert len(status) <= 10 * 5 + 2 and len(every) <= 10 + 2
    assert len(comms.messages) <= 10 * (5 + 1 + 1) + 4
    assert max(len(update["value"]) for update in status) < 4000
    assert all(len(rows(update["value"])) <= MAX_ROWS for update in status)
    assert len(rows(every[-1]["value"])) == 64
    assert view.accordion.selected_index is None  # closed until the user opens it
    assert "nl-live" in view.widget._dom_classes
    view.finish()
