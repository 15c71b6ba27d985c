"""The config panel: settings, the resolved plan, and Launch/Stop buttons driving real runs."""

from __future__ import annotations

import html
import os
import time

import pytest

from notebook_launcher import LaunchPanel, LaunchStoppedError, RayCluster, log
from notebook_launcher.launch.planning.planner import most_processes, plan_launch


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
    assert panel.view.most_processes == 2 and panel.view.processes_note.value == ""
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
    assert panel.result is first.result and panel.result.values == [0, 1]
    assert "[0, 1]" in panel.message.value and "panel.result" in panel.message.value
    second = panel.launch()
    assert panel.result is None  # running
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


def test_the_processes_field_accepts_what_the_launcher_accepts_and_never_clamps(comms, monkeypatch):
    from notebook_launcher.launch.planning.planner import MAX_PROCESSES_ENV

    monkeypatch.setenv(MAX_PROCESSES_ENV, "8")
    panel = LaunchPanel(train, args=(0.1,), num_processes=2)
    assert panel.view.most_processes == most_processes()[0] == 8
    panel.num_processes.value = 8
    assert panel.num_processes.value == 8 and panel.settings().num_processes == 8
    assert panel.view.processes_note.value == "" and not panel.launch_button.disabled
    assert "cpu × 8" in panel.plan.value
    panel.num_processes.value = 9  # the launcher's own refusal, word for word
    with pytest.raises(ValueError) as refused:
        plan_launch(num_processes=9)
    assert panel.num_processes.value == 9
    assert html.escape(str(refused.value)) in panel.view.processes_note.value
    assert f"{MAX_PROCESSES_ENV}=8" in panel.view.processes_note.value
    assert panel.launch_button.disabled


def test_the_processes_field_says_in_red_why_it_refuses_0_and_starts_nothing(comms):
    panel = LaunchPanel(train, args=(0.1,), num_processes=2)
    panel.num_processes.value = 0
    assert panel.num_processes.value == 0  # kept as typed
    note = panel.view.processes_note.value
    assert 'style="color:#d62728"' in note
    assert "num_processes=0 is not valid: expected an int &gt;= 1 and &lt;= " in note
    assert panel.launch_button.disabled and "cpu ×" not in panel.plan.value
    assert panel.launch() is None and panel.handle is None  # refused from code too
    assert "ValueError: num_processes=0 is not valid" in panel.message.value
    panel.num_processes.value = 1
    assert panel.view.processes_note.value == "" and not panel.launch_button.disabled
    assert "cpu × 1" in panel.plan.value


def test_the_field_bound_is_the_one_the_launcher_holds_to(comms):
    most, _ = most_processes()
    panel = LaunchPanel(train, args=(0.1,), num_processes=1)
    panel.num_processes.value = most
    assert panel.view.processes_note.value == "" and plan_launch(num_processes=most)
    panel.num_processes.value = most + 1
    with pytest.raises(ValueError) as refused:
        plan_launch(num_processes=most + 1)
    assert html.escape(str(refused.value)) in panel.view.processes_note.value


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
        {"mixed_precision": ["x"], "start_method": ["y"], "output": ["a", "b"], "placement": ["p"]},
        3,
        plan=plan,
        backend=lambda device: f"{device}-group",
        start=start,
    )
    assert view.most_processes == 3 and view.timeout.value == 0.0
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


def fake_view(cluster=None):
    """A view on fake callables: the plan echoes the form's values (and the cluster's record a
    fake panel would make of its fields); starting a run fails the test."""
    from types import SimpleNamespace

    from notebook_launcher.ui.config_panel import SETTINGS, ConfigPanel

    def plan(values):
        fields = values["cluster"]
        record = None
        if fields is not None:
            reserved = ", ".join(f"{k}: {v:g}" for k, v in fields["resources_per_process"].items())
            record = SimpleNamespace(**fields, describe=lambda: "{" + reserved + "}")
        return SimpleNamespace(
            **(values | {"cluster": record}),
            world_size=values["num_processes"],
            device="abacus",
            master_addr="127.0.0.1",
            requested_port=0,
            threads_per_process=1,
        )

    values = dict.fromkeys(SETTINGS, None) | {"num_processes": 2, "output": "a"}
    values |= {"mixed_precision": "x", "start_method": "y", "cluster": cluster}
    return ConfigPanel(
        "fit",
        values,
        {"mixed_precision": ["x"], "start_method": ["y"], "output": ["a"], "placement": ["p", "s"]},
        3,
        plan=plan,
        backend=lambda device: "group",
        start=lambda values: pytest.fail("nothing may start"),
        cluster_max_processes=64,
        local_only=["start_method"],
    )


def test_the_view_offers_a_ray_cluster_and_switching_back_restores_this_machine(comms):
    view = fake_view()
    assert view.where.options == ("this machine", "Ray cluster", "Slurm")
    assert view.values()["cluster"] is None and "<td>this machine</td>" in view.plan.value
    assert view.where_form.fields.layout.display == "none"  # the cluster's fields hidden
    view.where.value = "Ray cluster"
    assert view.start_method.disabled and view.most_processes == 64
    assert view.where_form.fields.layout.display is None
    view.num_processes.value = 8
    view.address.value = " 10.0.0.5:6379 "
    view.cpus.value, view.gpus.value = 4, 1
    view.custom_resources.value = "slot=1, pair=0.5"
    view.placement.value = "s"
    assert view.values()["cluster"] == {
        "address": "10.0.0.5:6379",
        "resources_per_process": {"CPU": 4.0, "GPU": 1.0, "slot": 1.0, "pair": 0.5},
        "placement": "s",
    }
    where = "Ray cluster (address 10.0.0.5:6379), 8 ranks × {CPU: 4, GPU: 1, slot: 1, pair: 0.5}"
    assert f"<td>{where}</td>" in view.plan.value and "<td>s</td>" in view.plan.value
    assert "rank 0&#x27;s node" in view.plan.value  # no port of this machine's is checked
    view.address.value, view.cpus.value, view.gpus.value = "", 0, 0
    view.custom_resources.value = "slot=2"
    assert view.values()["cluster"]["address"] is None  # as ray.init() chooses
    assert view.values()["cluster"]["resources_per_process"] == {"slot": 2.0}  # 0 CPUs left out
    assert "(address as ray.init() chooses), 8 ranks × {slot: 2}" in view.plan.value
    # Switching back: this machine again, the start method enabled, the machine's bound back:
    # the 8 ranks are kept as typed and refused beside the field, not turned into 3.
    view.where.value = "this machine"
    assert view.values()["cluster"] is None and not view.start_method.disabled
    assert view.most_processes == 3 and view.num_processes.value == 8
    assert "num_processes=8 is not valid: expected an int &gt;= 1 and &lt;= 3" in (
        view.processes_note.value
    )
    assert view.launch_button.disabled
    assert view.where_form.fields.layout.display == "none"
    view.num_processes.value = 3
    assert view.processes_note.value == "" and not view.launch_button.disabled
    assert "<td>this machine</td>" in view.plan.value


def test_a_view_given_a_cluster_starts_on_it(comms):
    given = {"address": "auto", "resources_per_process": {"CPU": 2.0, "slot": 1.0}}
    view = fake_view(cluster=given | {"placement": "s"})
    assert view.where.value == "Ray cluster" and view.start_method.disabled
    assert (view.address.value, view.cpus.value, view.gpus.value) == ("auto", 2.0, 0.0)
    assert view.custom_resources.value == "slot=1" and view.placement.value == "s"
    assert view.values()["cluster"] == given | {"placement": "s"}


@pytest.mark.parametrize(
    ("field", "text", "match"),
    [
        ("custom_resources", "slot=abc", "custom resources='slot=abc' is not valid: the amount"),
        ("custom_resources", "slot", "custom resources='slot' is not valid: expected name=amount"),
        ("custom_resources", "slot=-1", "custom resources='slot=-1' is not valid: the amount"),
        ("custom_resources", "slot=1,slot=2", "'slot' is given twice"),
        ("custom_resources", "GPU=1", "give GPU in its own field, 'GPUs per rank'"),
        ("address", "   ", "address='   ' is not valid: leave it empty"),
    ],
)
def test_the_view_refuses_bad_cluster_fields_by_name_and_starts_nothing(comms, field, text, match):
    view = fake_view()
    view.where.value = "Ray cluster"
    getattr(view, field).value = text
    assert html.escape(match) in view.plan.value
    assert view.launch() is None and view.handle is None  # fake_view's start fails the test
    assert "ValueError: " in view.message.value
    assert html.escape(match) in view.message.value


def test_choosing_a_ray_cluster_launches_with_its_record(comms):
    panel = LaunchPanel(train, args=(1,), num_processes=2, max_processes=2, start_method="spawn")
    assert panel.settings().cluster is None and panel.settings().start_method == "spawn"
    panel.where.value = "Ray cluster"
    panel.num_processes.value = 4  # more than this machine: the cluster has the room
    panel.address.value = "127.0.0.1:6379"
    panel.custom_resources.value = "slot=1"
    panel.placement.value = "spread"
    settings = panel.settings()
    assert settings.cluster == RayCluster(
        address="127.0.0.1:6379", resources_per_process={"CPU": 1, "slot": 1}, placement="spread"
    )
    assert settings.num_processes == 4 and settings.start_method == "fork"  # "not used"
    assert panel.start_method.disabled and panel.start_method.value == "spawn"
    where = "Ray cluster (address 127.0.0.1:6379), 4 ranks × {CPU: 1, slot: 1}"
    assert f"<td>{where}</td>" in panel.plan.value and "4 (ray)" in panel.plan.value
    shown = panel.static_html()
    assert f"<td>{where}</td>" in shown and "<td>spread</td>" in shown
    assert "start method" not in shown
    panel.where.value = "this machine"  # the 4 ranks kept, refused here, until changed
    assert "num_processes=4 is not valid" in panel.view.processes_note.value
    assert "this panel&#x27;s max_processes=2" in panel.view.processes_note.value
    assert panel.launch_button.disabled
    panel.num_processes.value = 2
    settings = panel.settings()
    assert settings.cluster is None and settings.start_method == "spawn"
    assert settings.num_processes == 2 and not panel.start_method.disabled
    assert not panel.launch_button.disabled
    assert "<td>2 (spawn)</td>" in panel.plan.value


def test_a_panel_given_a_cluster_keeps_its_runtime_env_and_timeout(comms):
    given = RayCluster(resources_per_process={"CPU": 2}, runtime_env={"env_vars": {"A": "1"}})
    panel = LaunchPanel(train, num_processes=8, max_processes=2, cluster=given)
    assert panel.where.value == "Ray cluster" and panel.num_processes.value == 8
    assert panel.cpus.value == 2 and panel.custom_resources.value == ""
    assert panel.settings().cluster == given
    panel.gpus.value = 1
    assert panel.settings().cluster.runtime_env == {"env_vars": {"A": "1"}}
    assert "nccl" in panel.plan.value  # a GPU per rank: the ranks' group runs on NCCL


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("gpus", 2, "GPU must be 1 (or a fraction of one)"),
        ("cpus", -1, "the amount of 'CPU' must be a finite number >= 0"),
        ("cpus", 0, "at least one amount must be above zero"),
        ("custom_resources", "TPU=4", "TPU ranks are not run on a Ray cluster"),
        ("custom_resources", "slot=x", "custom resources='slot=x' is not valid"),
        ("address", " ", "address=' ' is not valid"),
    ],
)
def test_a_refused_cluster_is_explained_and_nothing_starts(comms, field, value, match):
    panel = LaunchPanel(train, args=(0.1,), num_processes=2, max_processes=2)
    panel.where.value = "Ray cluster"
    getattr(panel, field).value = value
    shown = html.escape(match)
    assert shown in panel.plan.value
    assert panel.launch() is None and panel.handle is None
    assert shown in panel.message.value and not panel.launch_button.disabled
