"""The panels in a real kernel: what a launch sends on IOPub (widget comms, display updates)."""

from __future__ import annotations

import json
import queue
import time

import pytest

pytestmark = pytest.mark.kernel

TRAIN = r"""
import os, time
from notebook_launcher import notebook_launcher, log, progress, set_status

def train(steps):
    rank = int(os.environ["RANK"])
    set_status("training")
    for step in progress(range(steps), desc="train"):
        log({"loss": 1.0 / (step + 1), "rank": float(rank)}, step=step)
        if step % 20 == 0:
            print(f"step {step} <b>of</b> rank {rank}", flush=True)
        time.sleep(0.02)
    return rank
"""


def comm_states(messages: list[dict]) -> dict[str, list[dict]]:
    """Each widget's state updates, by comm id, in order."""
    found: dict[str, list[dict]] = {}
    for msg in messages:
        if msg["msg_type"] == "comm_msg" and msg["content"]["data"].get("method") == "update":
            found.setdefault(msg["content"]["comm_id"], []).append(msg["content"]["data"]["state"])
    return found


def html_values(messages: list[dict], marker: str) -> list[str]:
    return [
        state["value"]
        for states in comm_states(messages).values()
        for state in states
        if marker in state.get("value", "")
    ]


def test_a_blocking_launch_draws_live_panels_and_keeps_output_and_result(kernel):
    kernel.execute(TRAIN, timeout=30)
    started = time.monotonic()
    cell = kernel.execute(
        "result = notebook_launcher(train, args=(80,), num_processes=2)\nresult", 90
    )
    took = time.monotonic() - started

    assert cell.error() is None, cell.output()
    assert cell.result() == "LaunchResult(2 processes, by rank: {0: 0, 1: 1})"
    lines = cell.stream("stdout").splitlines()
    expected = [f"[rank{r}] step {s} <b>of</b> rank {r}" for r in (0, 1) for s in (0, 20, 40, 60)]
    assert sorted(lines) == sorted(expected)
    assert cell.stream("stderr") == ""

    opened = [
        m for m in cell.of_type("comm_open") if m["content"]["target_name"] == "jupyter.widget"
    ]
    assert opened, "no widget was created"
    live, kept = cell.of_type("display_data")
    assert list(live["content"]["data"]) == ["application/vnd.jupyter.widget-view+json"]

    updates = cell.of_type("comm_msg")
    assert len(updates) / took < 200, f"{len(updates)} widget messages in {took:.1f} s"
    assert len(updates) < 100  # about 5 status + 1 chart updates a second, for a few seconds

    tables = html_values(cell.messages, "nl-status")
    assert any(t.count('data-state="running"') == 2 for t in tables), "never seen running"
    assert "step 40 &lt;b&gt;of&lt;/b&gt; rank" in "".join(tables)
    assert "<b>of</b>" not in "".join(tables)
    charts = html_values(cell.messages, "nl-metrics")
    assert len({c for c in charts if 'data-metric="loss"' in c}) >= 2  # the chart grew live

    # When the run ends the widgets leave the cell (their output keeps no data, their models are
    # closed) and a static copy of the final panel follows the run's output.
    (emptied,) = cell.of_type("update_display_data")
    assert emptied["content"]["data"] == {}
    assert emptied["content"]["transient"] == live["content"]["transient"]
    closed = {m["content"]["comm_id"] for m in cell.of_type("comm_close")}
    views = {
        m["content"]["comm_id"]
        for m in opened
        if m["content"]["data"]["state"]["_model_name"] in ("HTMLModel", "VBoxModel")
    }
    assert len(views) == 4 and views <= closed  # the box, the table, the charts, the style
    order = [m["msg_type"] for m in cell.messages]
    at = cell.messages.index(kept)
    assert at > max(i for i, t in enumerate(order) if t == "stream")
    assert at < order.index("execute_result")
    static = kept["content"]["data"]
    assert sorted(static) == ["text/html", "text/plain"]
    assert static["text/plain"] == "notebook_launcher: 2 ranks: 2 finished; metrics: loss, rank"
    page = static["text/html"]
    assert page.count('data-state="finished"') == 2 and 'data-logged="160"' in page
    assert "<script" not in page and "step 60 &lt;b&gt;of&lt;/b&gt; rank" in page

    again = kernel.execute("print(result.panel.model.summary()); result.panel", 30)
    assert again.stream() == "2 ranks: 2 finished; metrics: loss, rank\n"
    assert again.result() == static["text/plain"]

    shown_again = kernel.execute("result.show()", 30)
    (shown,) = shown_again.of_type("display_data")
    assert shown["content"]["data"]["text/plain"] == static["text/plain"]
    assert shown["content"]["data"]["text/html"].count('data-state="finished"') == 2
    assert not shown_again.of_type("comm_open")  # static: kept in the saved notebook


def test_ui_none_and_console_send_no_widgets(kernel):
    kernel.execute(TRAIN, timeout=30)
    for ui in ("none", "console"):
        cell = kernel.execute(
            f"notebook_launcher(train, args=(5,), num_processes=2, ui={ui!r})", 90
        )
        assert cell.error() is None, cell.output()
        assert not cell.of_type("comm_open") and not cell.of_type("display_data")
        console = "notebook_launcher: 2 ranks · 2 finished" in cell.stream("stdout")
        assert console == (ui == "console")
        assert cell.stream("stderr") == ""  # a successful run's status is no error


def test_a_launch_that_ends_before_its_widgets_are_due_sends_only_its_final_panel(kernel):
    kernel.execute(TRAIN, timeout=30)
    # The widgets of a blocking launch are due after SHOW_AFTER seconds; made long here so this
    # run (a few steps) surely ends first, whatever the machine's load.
    kernel.execute("import notebook_launcher.ui.widgets as _w; _w.SHOW_AFTER = 120.0", 30)
    cell = kernel.execute("notebook_launcher(train, args=(5,), num_processes=2)", 90)
    kernel.execute("_w.SHOW_AFTER = 0.3", 30)

    assert cell.error() is None, cell.output()
    assert not cell.of_type("comm_open") and not cell.of_type("update_display_data")
    (kept,) = cell.of_type("display_data")
    static = kept["content"]["data"]
    assert sorted(static) == ["text/html", "text/plain"]
    assert static["text/plain"].startswith("notebook_launcher: 2 ranks: 2 finished")
    assert static["text/html"].count('data-state="finished"') == 2


def collect_until_idle(kc, msg_id: str, timeout: float) -> list[dict]:
    """Every IOPub message (of any cell) until the cell ``msg_id`` is idle."""
    messages = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        messages.append(msg)
        parent = msg.get("parent_header", {}).get("msg_id")
        if parent == msg_id and msg["msg_type"] == "status":
            if msg["content"]["execution_state"] == "idle":
                return messages
    raise AssertionError(f"cell did not finish in {timeout} s")


def test_a_background_launch_returns_at_once_and_keeps_updating_its_panel(kernel):
    kernel.execute(TRAIN, timeout=30)
    first = kernel.execute(
        "from notebook_launcher import launch_in_background\n"
        "handle = launch_in_background(train, args=(100,), num_processes=2)\n"
        "handle",
        timeout=30,
    )
    assert first.error() is None, first.output()
    assert first.result() == "LaunchHandle(running, 2 processes)"
    assert first.stream() == ""  # worker lines go under the panel, not into a cell
    assert len(first.of_type("display_data")) == 1

    kc = kernel.kc
    second = kc.execute("print(handle.wait(60).values, handle.status)")
    messages = collect_until_idle(kc, second, 90)
    from_thread = [m for m in messages if m["parent_header"].get("msg_id") == first.msg_id]
    tables = html_values(from_thread, "nl-status")
    assert tables and any(t.count('data-state="running"') == 2 for t in tables)
    logs = html_values(from_thread, "nl-log")
    assert logs and "[rank1] step 20 &lt;b&gt;of&lt;/b&gt; rank 1" in logs[-1]
    # At the end the widgets' output, in the launching cell, becomes the final panel.
    (kept,) = [m for m in from_thread if m["msg_type"] == "update_display_data"]
    display_id = first.of_type("display_data")[0]["content"]["transient"]["display_id"]
    assert kept["content"]["transient"]["display_id"] == display_id
    static = kept["content"]["data"]
    assert static["text/plain"] == "notebook_launcher: 2 ranks: 2 finished; metrics: loss, rank"
    assert static["text/html"].count('data-state="finished"') == 2
    assert "[rank1] step 80 &lt;b&gt;of&lt;/b&gt; rank 1" in static["text/html"]  # its log
    printed = "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == second
    )
    assert printed == "[0, 1] finished\n"
    json.dumps([m["content"] for m in from_thread], default=str)  # plain data only


def test_the_config_panel_leaves_its_settings_in_a_saved_notebook(kernel):
    cell = kernel.execute(
        "from notebook_launcher import LaunchPanel\n"
        "def fit(steps):\n    return steps\n"
        "LaunchPanel(fit, args=(3,), num_processes=2, timeout=30)",
        timeout=60,
    )
    shown = [m["content"]["data"] for m in cell.of_type("display_data")]
    panel = next(data for data in shown if "application/vnd.jupyter.widget-view+json" in data)
    # Beside the widget: what a notebook saved without widget state, or exported, shows.
    assert panel["text/plain"] == "LaunchPanel(fit, idle)"
    html = panel["text/html"]
    assert '<div class="nl-launch-panel"><b>Launch</b> <code>fit</code>' in html
    assert "<td>processes</td><td>2</td>" in html.replace(
        '<td style="padding:0 8px 0 0;opacity:0.7">', "<td>"
    )
    assert "<td>30 s</td>" in html


ACCELERATOR_LOG = r"""
import time
from notebook_launcher import Accelerator, notebook_launcher

def train(steps):
    accelerator = Accelerator()  # no log_with: the panel is fed as Accelerate's is under a launcher
    accelerator.init_trackers("demo")
    for step in range(steps):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.05)
    accelerator.end_training()

notebook_launcher(train, args=(20,), num_processes=2)
"""


def test_our_accelerators_log_is_charted_with_default_settings(kernel):
    cell = kernel.execute(ACCELERATOR_LOG, 90)
    assert cell.error() is None, cell.output()
    kept = [
        m["content"]["data"].get("text/html", "")
        for m in cell.of_type("display_data")
        if "text/html" in m["content"]["data"]
    ]
    final = kept[-1]
    assert 'data-metric="loss"' in final  # the static copy's chart of the logged loss
