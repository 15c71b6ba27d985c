"""Trackers by name (W&B offline, MLflow's file store: the real packages), tracker objects of
Accelerate's, names without an adapter, and the live panel fed by default under the launcher."""

from __future__ import annotations

import accelerate
import pytest
from accelerate.state import AcceleratorState as TheirState
from accelerate.state import GradientState as TheirGradientState
from accelerate.tracking import GeneralTracker as TheirTracker

from notebook_launcher import Accelerator, notebook_launcher
from notebook_launcher.state import reset_state

pytestmark = pytest.mark.usefixtures("no_accelerate_state")


class Recorder(TheirTracker):
    """A tracker written for Accelerate: records every call it gets."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self):
        super().__init__()
        self.calls = []

    @property
    def tracker(self):
        return self.calls

    def start(self):
        self.calls.append(("start",))

    def store_init_configuration(self, values):
        self.calls.append(("config", dict(values)))

    def log(self, values, step=None, **kwargs):
        self.calls.append(("log", dict(values), step, kwargs))

    def finish(self):
        self.calls.append(("finish",))


class DuckTracker:
    """Not a subclass of any GeneralTracker: the methods are enough."""

    name = "duck"
    main_process_only = True

    def __init__(self):
        self.calls = []

    tracker = property(lambda self: None)

    def start(self):
        self.calls.append("start")

    def store_init_configuration(self, values):
        self.calls.append("config")

    def log(self, values, step=None, **kwargs):
        self.calls.append(("log", step))

    def finish(self):
        self.calls.append("finish")


def _run(accelerator):
    accelerator.init_trackers("run", config={"lr": 0.1, "name": "x"})
    accelerator.log({"loss": 1.5, "acc": 2}, step=3, log_kwargs={"recorder": {"commit": True}})
    accelerator.log({"loss": 1.0})
    accelerator.end_training()


def test_accelerates_tracker_objects_are_called_as_accelerate_calls_them():
    theirs, ours, duck = Recorder(), Recorder(), DuckTracker()
    _run(accelerate.Accelerator(cpu=True, log_with=[theirs]))
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()
    accelerator = Accelerator(cpu=True, log_with=[ours, duck])
    _run(accelerator)
    assert ours.calls == theirs.calls
    assert duck.calls == ["start", "config", ("log", 3), ("log", None), "finish"]


@pytest.mark.parametrize("name", ["comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio"])
def test_names_without_an_adapter_are_refused_up_front(name):
    with pytest.raises(ValueError, match=rf"log_with='{name}'.*supported: 'notebook', "):
        Accelerator(log_with=name)
    with pytest.raises(ValueError, match="'wandb', 'mlflow'"):
        Accelerator(log_with=["notebook", name])


def test_wandb_offline_run(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    accelerator = Accelerator(cpu=True, log_with="wandb")
    accelerator.init_trackers(
        "demo", config={"lr": 0.1}, init_kwargs={"wandb": {"dir": str(tmp_path), "name": "a"}}
    )
    run = accelerator.get_tracker("wandb", unwrap=True)
    assert run.project == "demo" and run.name == "a" and run.config["lr"] == 0.1
    accelerator.log({"loss": 0.5}, step=1)
    accelerator.log({"loss": 0.25}, step=2)
    assert run.summary["loss"] in (0.5, 0.25)  # a step is committed when the next begins
    accelerator.end_training()
    wandb.teardown()  # its service process, which the test must not leave behind
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def _mlflow_runs(uri):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("demo")
    runs = client.search_runs([experiment.experiment_id])
    return [
        (
            run.data.params,
            {
                k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)]
                for k in run.data.metrics
            },
            run.info.status,
            run.info.run_name,
        )
        for run in runs
    ]


def test_mlflow_file_store_gets_what_accelerate_would_write(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 deprecates it, still works
    results = []
    for kind in ("theirs", "ours"):
        uri = f"file:{tmp_path / kind}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        make = accelerate.Accelerator if kind == "theirs" else Accelerator
        accelerator = make(cpu=True, log_with="mlflow")
        accelerator.init_trackers(
            "demo", config={"lr": 0.1, "layers": 2}, init_kwargs={"mlflow": {"run_name": "r"}}
        )
        accelerator.log({"loss": 0.5, "note": "text"}, step=1)
        accelerator.log({"loss": 0.25}, step=2)
        accelerator.end_training()
        results.append(_mlflow_runs(uri))
        TheirState._reset_state(reset_partial_state=True)
        TheirGradientState._reset_state()
        reset_state()
    assert results[1] == results[0]
    assert results[1] == [
        ({"lr": "0.1", "layers": "2"}, {"loss": [(1, 0.5), (2, 0.25)]}, "FINISHED", "r")
    ]


def _default_panel():
    accelerator = Accelerator()
    accelerator.init_trackers("demo")
    for step in range(2):
        accelerator.log({"loss": float(step + accelerator.process_index)}, step=step)
    names = [t.name for t in accelerator.trackers]
    accelerator.end_training()
    return names


def _accelerate_tracker_on_ranks():
    recorder = Recorder()
    accelerator = Accelerator(log_with=[recorder])
    accelerator.init_trackers("demo", config={"a": 1})
    accelerator.log({"loss": 1.0}, step=0)
    accelerator.end_training()
    return [call[0] for call in recorder.calls]


def test_under_the_launcher_the_panel_charts_without_log_with():
    result = notebook_launcher(_default_panel, num_processes=2, ui="none")
    assert list(result) == [["notebook"], ["notebook"]]
    loss = result.panel.model.metrics["loss"]
    assert [loss.per_rank[rank].points() for rank in (0, 1)] == [
        [(0, 0.0), (1, 1.0)],
        [(0, 1.0), (1, 2.0)],
    ]


def test_under_the_launcher_accelerates_trackers_run_on_the_main_process_only():
    result = notebook_launcher(_accelerate_tracker_on_ranks, num_processes=2, ui="none")
    assert list(result) == [["start", "config", "log", "finish"], []]


class Registered(Recorder):
    """A tracker class made known to Accelerate by name; instances record into ``made``."""

    name = "registered_recorder"
    made: list = []

    def __init__(self, run_name, **kwargs):
        super().__init__()
        self.calls.append(("init", run_name, kwargs))
        Registered.made.append(self)


def test_names_registered_with_accelerate_are_accepted_and_called_as_accelerate_calls_them():
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, register_tracker_class

    register_tracker_class(Registered)
    try:
        for make in (accelerate.Accelerator, Accelerator):
            accelerator = make(cpu=True, log_with="registered_recorder")
            accelerator.init_trackers("run", init_kwargs={"registered_recorder": {"a": 1}})
            accelerator.log({"loss": 1.0}, step=1)
            accelerator.end_training()
            TheirState._reset_state(reset_partial_state=True)
            TheirGradientState._reset_state()
        theirs, ours = Registered.made
        assert ours.calls == theirs.calls and ours.calls[0] == ("init", "run", {"a": 1})
    finally:
        LOGGER_TYPE_TO_CLASS.pop("registered_recorder", None)
    with pytest.raises(ValueError, match="registered_recorder"):
        Accelerator(log_with="registered_recorder")


def test_all_leaves_out_trackers_that_need_a_directory_when_there_is_none(monkeypatch, tmp_path):
    from notebook_launcher.accelerator import trackers

    monkeypatch.setattr(trackers, "_available", lambda name: True)  # as if all were installed
    assert Accelerator(log_with="all").log_with == ["notebook", "wandb", "mlflow"]
    with_dir = Accelerator(log_with="all", project_dir=str(tmp_path)).log_with
    assert with_dir == ["notebook", "tensorboard", "wandb", "mlflow"]
