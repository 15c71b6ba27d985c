"""Views of the run model: HTML status table, SVG charts, widgets (messages counted), console."""

from __future__ import annotations

import base64
import html
import io
import re

import pytest

from notebook_launcher.protocol.events import (
    OutputLine,
    SupervisorTick,
    TrackingBatch,
    WorkerFailed,
    WorkerFinished,
    WorkerStarted,
    WorkerStopped,
)
from notebook_launcher.ui import ConsoleView, RunModel, RunPanel, View, check_ui, resolve_ui
from notebook_launcher.ui.charts import MAX_DRAWN, metrics_html
from notebook_launcher.ui.render import (
    LINE_CHARS,
    STATUS_CHARS,
    ago,
    clip,
    status_html,
    status_text,
)
from notebook_launcher.ui.widgets import WidgetView, widget_bundle

HOSTILE = "<script>alert('x')</script> & <b>bold</b>"


def run_model(clock, num_processes: int = 2) -> RunModel:
    model = RunModel(num_processes, clock=clock)
    for rank in range(num_processes):
        model.apply(WorkerStarted(rank, 100 + rank, 0.0))
    return model


def test_status_table_escapes_every_text_a_worker_sent(clock):
    model = run_model(clock)
    model.apply(OutputLine(0, "stdout", HOSTILE))
    model.apply(TrackingBatch(1, status=HOSTILE, progress=(HOSTILE, 1, 2, 1.0)))
    model.apply(WorkerFailed(1, "x.Boom", HOSTILE, "", None, 0.0))
    page = status_html(model, clock.now)
    assert "<script>" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold" in page


def test_status_table_has_one_row_per_rank_with_its_state_and_the_failure_in_red(clock):
    model = run_model(clock, 3)
    model.apply(WorkerFinished(0, b"", 0.0))
    model.apply(WorkerFailed(2, "builtins.ValueError", "bad lr\nmore", "", None, 0.0))
    page = status_html(model, clock.now)
    states = re.findall(r'data-rank="(\d)" data-state="(\w+)"', page)
    assert states == [("0", "finished"), ("1", "running"), ("2", "failed")]
    failed_row = page.split('data-rank="2"')[1]
    assert "nl-error" in failed_row and "ValueError: bad lr" in failed_row
    assert "more" not in failed_row  # only the error's first line
    assert "rgba(214,39,40" in page.split('data-rank="2"')[0].rsplit("<tr", 1)[1] + failed_row


def test_progress_bar_rate_and_memory_columns(clock):
    model = run_model(clock, 1)
    model.apply(TrackingBatch(0, progress=("train", 25, 100, 2.0), memory=5 << 30))
    page = status_html(model, clock.now)
    assert "width:25.0%" in page and "train 25/100" in page
    assert "12.5" in page  # it/s
    assert "memory" in page and "5.0 GiB" in page


def test_memory_column_only_where_a_rank_reported_memory(clock):
    assert "memory" not in status_html(run_model(clock), clock.now)


def test_time_since_last_sign_of_life_is_coarse(clock):
    assert [ago(s) for s in (None, 0.4, 5.7, 125, 7200)] == ["", "now", "5 s", "2 min", "2.0 h"]
    model = run_model(clock, 1)
    clock.advance(12.3)
    assert ">12 s<" in status_html(model, clock.now)


def test_charts_draw_each_metric_per_rank_and_the_mean_within_the_point_budget(clock):
    model = run_model(clock)
    for step in range(5000):
        for rank in range(2):
            model.apply(TrackingBatch(rank, metrics=((step, {"loss": 1.0 / (step + 1)}),)))
    model.apply(TrackingBatch(0, metrics=((0, {HOSTILE: 1.0}),)))
    model.finish()
    page = metrics_html(model)
    assert page.count("<svg") == 2
    assert "<script>" not in page
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', page)
    assert lines and all(len(line.split()) <= MAX_DRAWN + 1 for line in lines)
    chart = re.search(r'data-metric="loss" data-points="(\d+)" data-logged="(\d+)"', page)
    assert 250 <= int(chart[1]) <= 501 and chart[2] == "10000"
    assert "rank&nbsp;0" in page and "mean" in page


def test_no_metrics_no_charts(clock):
    assert metrics_html(run_model(clock)) == ""


def test_widget_view_keeps_widget_traffic_low_under_a_flood_of_events(clock, comms):
    """8 ranks x 1000 metrics/s for 20 s: status at <= 5 Hz, charts at <= 1 Hz."""
    model = RunModel(8, clock=clock)
    view = WidgetView(model)
    view.widget  # noqa: B018 (creates the widgets, as placing them in the config panel does)
    comms.clear()
    for rank in range(8):
        view(WorkerStarted(rank, rank, 0.0))
    step = 0
    for _ in range(200):  # batches every 0.1 s, as the workers send them
        clock.advance(0.1)
        for rank in range(8):
            records = tuple((step + i, {"loss": 1.0 / (step + i + 1)}) for i in range(100))
            view(TrackingBatch(rank, metrics=records, progress=("train", step + 100, 20000, 1)))
        view(SupervisorTick(clock.now, tuple((r, clock.now) for r in range(8))))
        step += 100
    for rank in range(8):
        view(WorkerFinished(rank, b"", 0.0))
    view.finish()
    status, charts = comms.updates(view.status), comms.updates(view.charts)
    assert len(status) <= 20 * 5 + 2
    assert 10 <= len(charts) <= 20 * 1 + 2
    assert len(comms.messages) <= 20 * 6 + 4
    assert all(m == 8 * 20000 for m in [model.metrics["loss"].logged])
    final = status[-1]["value"]
    assert final.count('data-state="finished"') == 8
    assert 'data-logged="160000"' in charts[-1]["value"]


def test_a_quiet_run_costs_one_message_a_second(clock, comms):
    model = run_model(clock)
    view = WidgetView(model)
    view.widget  # noqa: B018 (creates the widgets, as placing them in the config panel does)
    comms.clear()
    for _ in range(40):  # 10 s of ticks at 4 Hz, nothing new from the ranks
        clock.advance(0.25)
        view(SupervisorTick(clock.now, ((0, clock.now), (1, clock.now))))
    assert len(comms.messages) == 10  # only the elapsed seconds in the headline changed


def test_widget_view_of_a_background_run_keeps_a_bounded_escaped_log_tail(clock, comms):
    view = WidgetView(RunModel(1, clock=clock), log_lines=3)
    view.widget  # noqa: B018 (creates the widgets, as placing them in the config panel does)
    stdout, stderr = view.streams
    for i in range(10):
        stdout.write(f"[rank0] line {i} {HOSTILE}\n")
    clock.advance(1)
    view(SupervisorTick(clock.now))
    shown = view.log_widget.value
    assert "line 6" not in shown and "line 7" in shown and "line 9" in shown
    assert "<script>" not in shown


def test_a_widget_view_creates_no_widget_until_it_is_placed(clock, comms):
    model = run_model(clock)
    view = WidgetView(model)
    clock.advance(5)
    view(SupervisorTick(clock.now, ((0, clock.now), (1, clock.now))))
    assert comms.messages == []
    box = view.widget
    assert box.children == (view.status, view.charts, view.style)
    assert 'data-state="running"' in view.status.value  # drawn from the model as it is now


def test_widget_bundle_is_a_bare_widget_view(comms):
    import ipywidgets

    widget = ipywidgets.HTML("x")
    bundle = widget_bundle(widget)
    assert list(bundle) == ["application/vnd.jupyter.widget-view+json"]
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.model_id


def test_a_view_that_breaks_stops_drawing_and_says_so_once(clock):
    class Broken(View):
        kind = "broken"

        def refresh(self, now):
            raise RuntimeError("cannot draw")

    view = Broken(RunModel(1, clock=clock))
    with pytest.warns(RuntimeWarning, match="cannot draw"):
        view(WorkerStarted(0, 1, 0.0))
    view(WorkerFinished(0, b"", 0.0))  # ignored quietly, the launch goes on
    view.finish()
    assert view.broken is not None


def test_console_view_is_silent_for_a_short_plain_run(clock):
    out = io.StringIO()
    view = ConsoleView(run_model(clock), stream=out)
    clock.advance(3)
    view(WorkerFinished(0, b"", 0.0))
    view(WorkerFinished(1, b"", 0.0))
    view.finish()
    assert out.getvalue() == ""


def test_console_view_prints_whole_tables_every_10_s_and_a_final_one(clock):
    out = io.StringIO()
    model = run_model(clock)
    view = ConsoleView(model, stream=out)
    for _ in range(250):
        clock.advance(0.1)
        view(TrackingBatch(0, metrics=((None, {"loss": 0.5}),)))
    view(WorkerFinished(0, b"", 0.0))
    view(WorkerFailed(1, "builtins.KeyError", "'lr'", "", None, 0.0))
    view.finish()
    tables = out.getvalue().split("notebook_launcher: ")[1:]
    assert len(tables) == 3  # at 10 s, at 20 s, and the final one
    assert tables[-1].splitlines()[1:3] == [
        "  rank 0   finished   step 249",
        "  rank 1   failed     KeyError: 'lr'",
    ]
    assert "loss: mean 0.5 at step 249" in tables[-1]
    assert "[rank" not in out.getvalue()


def test_console_view_prints_a_final_table_when_ranks_reported_anything(clock):
    out = io.StringIO()
    view = ConsoleView(run_model(clock, 1), stream=out)
    view(TrackingBatch(0, status="done"))
    view.finish()
    assert out.getvalue().startswith("notebook_launcher: 1 rank · 1 running")


def test_console_status_goes_to_stdout_and_a_failed_runs_table_to_stderr(clock, capsys):
    view = ConsoleView(run_model(clock, 1))
    view(TrackingBatch(0, status="done"))
    view(WorkerFinished(0, b"", 0.0))
    view.finish()
    captured = capsys.readouterr()
    assert captured.out.startswith("notebook_launcher: 1 rank · 1 finished") and not captured.err
    failing = ConsoleView(run_model(clock, 1))
    failing(TrackingBatch(0, status="done"))
    failing(WorkerFailed(0, "builtins.ValueError", "x", "", None, 0.0))
    failing.finish()
    captured = capsys.readouterr()
    assert captured.err.startswith("notebook_launcher: 1 rank · 1 failed") and not captured.out


def test_run_panel_is_static_html_with_a_short_deterministic_text(clock):
    model = run_model(clock)
    model.apply(TrackingBatch(0, metrics=((0, {"loss": 1.0}), (1, {"loss": 0.5}))))
    model.apply(WorkerFinished(0, b"", 0.0))
    model.apply(WorkerFailed(1, "builtins.ValueError", "x", "", None, 0.0))
    model.finish()
    panel = RunPanel(model)
    bundle = panel._repr_mimebundle_()
    assert list(bundle) == ["text/html", "text/plain"]
    assert bundle["text/plain"] == (
        "notebook_launcher: 2 ranks; rank 1 failed: ValueError: x; metrics: loss"
    )
    page = bundle["text/html"]
    assert "<table" in page and "<script" not in page and "widget" not in page
    # Each chart a standalone SVG image, as an <img> and as the background of its box, so that
    # viewers that strip inline SVG and data: images, or styles, still show it.
    (uri,) = set(re.findall(r'src="(data:image/svg\+xml;base64,[^"]+)"', page))
    assert f"background-image:url('{uri}')" in page
    chart = base64.b64decode(uri.split(",", 1)[1]).decode()
    assert chart.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and "<polyline" in chart
    assert "var(--" not in chart  # an image of its own: no page styles reach it
    assert repr(panel) == "RunPanel(2 ranks: 1 finished, 1 failed; metrics: loss)"
    assert status_text(model, clock.now).startswith("notebook_launcher: 2 ranks")
    clock.advance(100)  # the text says nothing about time
    assert RunPanel(model)._repr_mimebundle_()["text/plain"] == bundle["text/plain"]


def test_a_run_that_logged_nothing_ends_as_one_line(clock):
    model = run_model(clock, 3)
    model.apply(OutputLine(0, "stdout", "hello"))
    for rank in range(3):
        model.apply(WorkerFinished(rank, b"", 0.0))
    assert "<table" in status_html(model, clock.now)  # while it runs: the table
    model.finish()
    page = RunPanel(model).html()
    assert "<table" not in page and "<svg" not in page and 'class="nl-status nl-compact"' in page
    assert re.findall(r'data-rank="(\d)" data-state="(\w+)"', page) == [
        ("0", "finished"),
        ("1", "finished"),
        ("2", "finished"),
    ]
    assert RunPanel(model).summary() == "notebook_launcher: 3 ranks: 3 finished"


def test_the_one_line_form_of_a_failed_run_names_the_failed_rank(clock):
    model = run_model(clock)
    model.apply(WorkerFailed(1, "builtins.ValueError", HOSTILE, "", None, 0.0))
    model.apply(WorkerStopped(0, "rank 1 failed", blamed=(1,)))
    model.finish()
    page = RunPanel(model).html()
    assert 'data-outcome="failed"' in page and "nl-compact" in page
    assert "rank 1: ValueError: &lt;script&gt;" in page and "<script>" not in page


def test_the_blamed_rank_is_highlighted(clock):
    """A stall: every rank stopped, the one the report blames is marked."""
    model = run_model(clock, 3)
    model.apply(TrackingBatch(0, metrics=((0, {"loss": 1.0}),)))
    for rank in range(3):
        model.apply(WorkerStopped(rank, "stall_timeout expired", blamed=(2,)))
    model.finish()
    assert model.outcome == "failed"
    page = status_html(model, clock.now)
    assert re.findall(r'<tr class="nl-row ([^"]*)" data-rank="(\d)"', page) == [
        ("nl-stopped", "0"),
        ("nl-stopped", "1"),
        ("nl-stopped nl-blamed", "2"),
    ]
    blamed_row = page.split('data-rank="2"')[1]
    assert "likely cause · stopped: stall_timeout expired" in blamed_row
    assert "rgba(214,39,40,0.14)" in re.search(r'<tr[^>]*data-rank="2"[^>]*>', page)[0]
    assert "rgba(214,39,40" not in re.search(r'<tr[^>]*data-rank="1"[^>]*>', page)[0]
    assert RunPanel(model).summary() == (
        "notebook_launcher: 3 ranks: 3 stopped (stall_timeout expired); likely cause: rank 2; "
        "metrics: loss"
    )
    assert "(likely cause)" in status_text(model, clock.now).splitlines()[3]


def test_a_secondary_failure_is_not_blamed(clock):
    model = run_model(clock)
    model.apply(WorkerFailed(0, "torch.distributed.DistBackendError", "peer gone", "", None, 0.0))
    model.apply(WorkerFailed(1, "builtins.ValueError", "the cause", "", None, 0.0))
    assert [state.blamed for state in model.ranks] == [True, False]  # until the kernel says
    model.apply(WorkerStopped(0, "rank 1 failed", blamed=(1,)))
    assert [state.blamed for state in model.ranks] == [False, True]


def test_a_stop_the_user_asked_for_is_neutral(clock):
    model = run_model(clock)
    model.apply(TrackingBatch(0, progress=("fit", 3, 10, 1.0)))
    for rank in range(2):
        model.apply(WorkerStopped(rank, "stop requested", requested=True))
    model.finish()
    assert model.outcome == "stopped"
    page = status_html(model, clock.now)
    assert 'data-outcome="stopped"' in page
    assert "#d62728" not in page and "rgba(214,39,40" not in page and "nl-error" not in page
    assert "2 stopped (stop requested)" in page
    # a timeout the user set is not a stop they asked for
    timed_out = run_model(clock)
    for rank in range(2):
        timed_out.apply(WorkerStopped(rank, "timeout expired"))
    assert timed_out.outcome == "failed"


def test_long_texts_end_with_an_ellipsis_at_a_word_and_show_in_full_on_hover(clock):
    model = run_model(clock, 1)
    words = " ".join(f"word{i}" for i in range(60)) + ' & "quoted"'
    model.apply(OutputLine(0, "stdout", words))
    model.apply(TrackingBatch(0, status="s" * 200))
    page = status_html(model, clock.now)
    line = re.search(r'<span title="([^"]*)">([^<]*)</span></code>', page)
    assert line[1] == html.escape(words)  # all of it, escaped, on hover
    shown = line[2]
    assert shown.endswith("…") and len(shown) <= LINE_CHARS
    assert words.startswith(shown[:-1]) and words[len(shown) - 1] == " "  # cut between words
    status = re.search(r'<i><span title="(s+)">(s+…)</span></i>', page)
    assert len(status[1]) == 200 and len(status[2]) == STATUS_CHARS  # no space: cut in the word
    assert clip("short", 10) == "short"


@pytest.mark.parametrize("ui", ["auto", "widgets", "console", "none"])
def test_ui_choices(ui):
    assert check_ui(ui) == ui


@pytest.mark.parametrize("ui", ["Widgets", "", None, 1, "text"])
def test_bad_ui_is_refused_by_name(ui):
    with pytest.raises(ValueError, match=r"ui=.* is not valid: allowed values are 'auto'"):
        check_ui(ui)


def test_auto_is_the_console_outside_a_kernel():
    assert resolve_ui("auto") == "console"


def test_a_result_shows_its_panel_as_text_outside_a_kernel(capsys):
    from notebook_launcher import debug_launcher, notebook_launcher

    result = notebook_launcher(int, args=("3",), num_processes=2, ui="none")
    result.show()
    assert capsys.readouterr().out.startswith("notebook_launcher: 2 ranks · 2 finished")
    with pytest.raises(RuntimeError, match="kept no panel"):
        debug_launcher(int, args=("3",)).show()
