"""The config panel: settings, the resolved plan, and Launch/Stop buttons driving real runs."""

from __future__ import annotations

import os
import time

import pytest

from notebook_launcher import LaunchPanel, LaunchStoppedError, log


def train(seconds):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} <starting>", flush=True)
    for step in range(int(seconds * 20)):
        log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.05)
    return rank


def wait_for(condition, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_the_panel_shows_the_resolved_plan_and_follows_the_settings(comms):
    panel = LaunchPanel(train, args=(1,), num_processes=2, max_processes=2)
    assert panel.num_processes.max == 2
    plan = panel.plan.value
    for part in ("cpu × 2", "gloo", "threads per process", "29500", "fork"):
        assert part in plan, part
    panel.num_processes.value = 1
    assert "cpu × 1" in panel.plan.value
    panel.timeout.value = -5
    assert "timeout=-5.0 is not valid" in panel.plan.value
    panel.timeout.value = 0
    assert "<td>none</td>" in panel.plan.value
    assert repr(panel) == "LaunchPanel(train, idle)"


def test_launch_and_stop_buttons_run_and_stop_a_real_launch(comms):
    panel = LaunchPanel(train, args=(60,), num_processes=2, max_processes=2)
    panel.launch_button.click()
    handle = panel.handle
    assert handle is not None and panel.running
    assert panel.launch_button.disabled and not panel.stop_button.disabled
    assert panel.runs.children == (handle.view.widget,)
    wait_for(lambda: 'data-state="running"' in handle.view.status.value)
    wait_for(lambda: "rank 1 &lt;starting&gt;" in handle.view.log_widget.value)
    panel.stop_button.click()
    assert handle.done and handle.status == "stopped"
    assert isinstance(handle.exception, LaunchStoppedError)
    assert not panel.launch_button.disabled and panel.stop_button.disabled
    assert "stopped after" in panel.message.value  # the user's own stop: no error
    assert "nl-run-error" not in panel.message.value and "#d62728" not in panel.message.value
    assert handle.view.status.value.count('data-state="stopped"') == 2


def test_a_finished_run_says_so_and_the_panel_can_launch_again(comms, capfd):
    panel = LaunchPanel(train, args=(0.2,), num_processes=2, max_processes=2, output="main")
    first = panel.launch()
    first.wait(60)
    wait_for(lambda: "finished in" in panel.message.value)
    second = panel.launch()
    assert second is not first
    assert second.wait(60).values == [0, 1]
    assert "rank 1" not in second.view.log_widget.value  # output="main"
    assert "starting" not in capfd.readouterr().out  # lines went to the panel, not the cell


def test_a_refused_launch_is_explained_in_the_panel(comms):
    panel = LaunchPanel(train, args=(0.1,), num_processes=2, max_processes=2)
    panel.stall_timeout.value = -1
    assert panel.launch() is None
    assert "stall_timeout=-1.0 is not valid" in panel.message.value
    assert panel.handle is None and not panel.launch_button.disabled


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"function": 3}, TypeError, "function=3 is not valid"),
        ({"num_processes": 5, "max_processes": 2}, ValueError, "num_processes=5 is not valid"),
        ({"max_processes": 0}, ValueError, "max_processes=0 is not valid"),
        ({"mixed_precision": "fp64"}, ValueError, "mixed_precision='fp64' is not valid"),
        ({"ui": "console"}, TypeError, "ui= is not valid here"),
        ({"args": 3}, TypeError, "args=3 is not valid"),
    ],
)
def test_bad_settings_are_refused_by_name(comms, kwargs, error, match):
    arguments = {"function": train, "num_processes": 1, "max_processes": 2, **kwargs}
    with pytest.raises(error, match=match):
        LaunchPanel(**arguments)


def test_the_view_runs_on_what_it_is_given_without_the_launcher(comms):
    """ui/config_panel takes its choices as data and plans and starts through callables."""
    from types import SimpleNamespace

    from notebook_launcher.ui.config_panel import SETTINGS, ConfigPanel

    planned, started = [], []

    def plan(values):
        planned.append(values)
        if values["timeout"] is not None and values["timeout"] < 0:
            raise ValueError("timeout is negative")
        fields = {name: values[name] for name in SETTINGS if name != "num_processes"}
        return SimpleNamespace(
            **fields,
            world_size=values["num_processes"],
            num_processes=values["num_processes"],
            device="abacus",
            master_addr="127.0.0.1",
            requested_port=0,
            threads_per_process=1,
        )

    def start(values):
        started.append(values)
        raise RuntimeError("no workers here\nsecond line")

    values = dict.fromkeys(SETTINGS, None) | {"num_processes": 2, "output": "b"}
    values |= {"mixed_precision": "x", "start_method": "y"}
    view = ConfigPanel(
        "fit",
        values,
        {"mixed_precision": ["x"], "start_method": ["y"], "output": ["a", "b"]},
        3,
        plan=plan,
        backend=lambda device: f"{device}-group",
        start=start,
    )
    assert view.num_processes.max == 3 and view.timeout.value == 0.0
    assert planned[-1] == values  # 0 read back as None
    for part in ("abacus × 2", "abacus-group", "any free port", "<td>none</td>"):
        assert part in view.plan.value, part
    view.timeout.value = -1
    assert "timeout is negative" in view.plan.value
    view.timeout.value = 5
    view.output.value = "a"
    assert view.values()["timeout"] == 5.0 and "<td>5 s</td>" in view.plan.value
    assert view.launch() is None and view.handle is None and not view.running
    assert started == [view.values()]
    assert "RuntimeError: no workers here<" in view.message.value
    assert view.stop() is True  # nothing to stop
    shown = view.static_html(SimpleNamespace(**view.values()))
    assert '<code>fit</code><table class="nl-settings"' in shown and "<td>5 s</td>" in shown
