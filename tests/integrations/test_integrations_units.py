"""The integrations piece by piece: the switch, the CPU-job variable, the import hooks, each
adapter fed directly in a process posing as a launched rank, and one Accelerator per process."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest
from helpers.channel import pose_as_worker

import notebook_launcher.live as tracking
from notebook_launcher import notebook_launcher
from notebook_launcher.integrations import (
    ENV_SWITCH,
    cpu_job_environment,
    enabled_integrations,
    hooks,
)


@pytest.fixture
def worker(monkeypatch):
    """This process poses as rank 0 of a launch for the length of the test."""
    yield from pose_as_worker(monkeypatch)


# -- the switch and the environment ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ("transformers", "lightning", "accelerate")),
        ("1", ("transformers", "lightning", "accelerate")),
        ("All", ("transformers", "lightning", "accelerate")),
        ("0", ()),
        ("off", ()),
        ("none", ()),
        ("lightning, transformers", ("transformers", "lightning")),
        ("accelerate", ("accelerate",)),
    ],
)
def test_the_switch_chooses_the_integrations(value, expected):
    assert enabled_integrations(value) == expected


def test_a_bad_switch_names_the_variable(monkeypatch):
    with pytest.raises(ValueError, match=f"{ENV_SWITCH}='keras' is not valid.*unknown: 'keras'"):
        enabled_integrations("keras")
    with pytest.raises(TypeError, match="value=3 is not valid"):
        enabled_integrations(3)
    monkeypatch.setenv(ENV_SWITCH, "transformers,keras")
    with pytest.raises(ValueError, match=f"environment variable {ENV_SWITCH}="):
        notebook_launcher(lambda: None, num_processes=1, output="none", ui="none")


def test_cpu_jobs_of_several_processes_tell_accelerate_to_join(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    assert cpu_job_environment("cpu", 2) == {"ACCELERATE_USE_CPU": "1"}
    assert cpu_job_environment("cpu", 1) == {}  # one process: Accelerate's own choice of device
    assert cpu_job_environment("cuda", 2) == {}
    monkeypatch.setenv("ACCELERATE_USE_CPU", "0")
    assert cpu_job_environment("cpu", 2) == {}  # the user's own setting stays


# -- import hooks ----------------------------------------------------------------------------------


@pytest.fixture
def probe_package(tmp_path, monkeypatch):
    """A package with a submodule, importable for the test, forgotten afterwards."""
    package = tmp_path / "nl_probe_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "core.py").write_text("class Thing:\n    def __init__(self):\n        self.n = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "nl_probe_package.core"
    hooks.undo()
    for name in ("nl_probe_package.core", "nl_probe_package"):
        sys.modules.pop(name, None)


def test_a_callback_runs_once_the_module_is_imported_and_the_module_keeps_its_loader(
    probe_package,
):
    seen = []
    hooks.when_imported(probe_package, seen.append)
    assert seen == []
    core = importlib.import_module(probe_package)

    assert seen == [core]
    assert type(core.__loader__).__name__ == "SourceFileLoader"
    assert core.__spec__.loader is core.__loader__
    later = []
    hooks.when_imported(probe_package, later.append)  # already imported: at once
    assert later == [core]


def test_wrapped_methods_are_put_back_and_a_failing_callback_only_warns(probe_package):
    core = importlib.import_module(probe_package)

    def __init__(wrapped, instance, args, kwargs):
        wrapped(*args, **kwargs)
        instance.n += 10

    original = core.Thing.__init__
    assert hooks.wrap_method(core.Thing, "__init__", __init__)
    assert not hooks.wrap_method(core.Thing, "__init__", __init__)  # never twice
    assert core.Thing().n == 11 and core.Thing.__init__.__wrapped__ is original
    special = type(
        "Special", (core.Thing,), {"__init__": lambda self: super(special, self).__init__()}
    )
    assert special().n == 11  # a subclass's super().__init__() goes through the wrapper too
    with pytest.warns(RuntimeWarning, match="could not set up its integration with"):
        hooks.when_imported(probe_package, lambda module: 1 / 0)
    hooks.undo()
    assert core.Thing.__init__ is original and core.Thing().n == 1


def test_undo_disarms_the_callbacks_still_waiting(probe_package):
    seen = []
    hooks.when_imported(probe_package, seen.append)
    hooks.undo()
    importlib.import_module(probe_package)
    assert seen == []
    hooks.when_imported(probe_package, seen.append)  # registered after undo: runs
    assert len(seen) == 1


def test_an_attribute_a_class_only_inherits_is_removed_again_on_undo(probe_package):
    core = importlib.import_module(probe_package)
    special = type("Special", (core.Thing,), {})

    assert hooks.replace(special, "__init__", lambda self: setattr(self, "n", 5))
    assert special().n == 5 and core.Thing().n == 1
    hooks.undo()
    assert "__init__" not in vars(special) and special().n == 1  # inherits again
    with pytest.raises(TypeError, match="callback=3 is not valid"):
        hooks.when_imported(probe_package, 3)


def test_in_a_fresh_worker_the_libraries_imported_later_are_set_up():
    """The import-hook path: nothing imported before the worker is prepared (spawn, or a kernel
    that never imported the libraries)."""
    script = textwrap.dedent(
        """
        import os, sys
        os.environ.pop("ACCELERATE_USE_CPU", None)
        from notebook_launcher.integrations import prepare_worker
        from notebook_launcher.protocol.context import WorkerContext

        context = WorkerContext(0, 0, 2, 2, 0, 1, "127.0.0.1", 0, "cpu", "no", 0)
        sys.ps1 = "In : "  # forked from a kernel
        assert prepare_worker(context) == ("transformers", "lightning", "accelerate")
        assert os.environ["ACCELERATE_USE_CPU"] == "1"
        assert not hasattr(sys, "ps1")  # the worker runs the function as a script
        import torch.distributed as dist
        assert dist.destroy_process_group.__wrapped__ is not None  # waits for gloo's threads
        assert not any(m in sys.modules for m in ("transformers", "lightning", "accelerate"))
        from transformers import Trainer
        import transformers.trainer as trainer
        from notebook_launcher.integrations.transformers import NotebookCallback
        assert NotebookCallback in trainer.DEFAULT_CALLBACKS
        from lightning.fabric import Fabric
        import lightning.fabric.connector as connector
        assert connector._IS_INTERACTIVE is False
        fabric = Fabric(accelerator="cpu", devices=1)
        assert [type(l).__name__ for l in fabric.loggers] == ["NotebookLogger"]
        import accelerate
        assert hasattr(accelerate.Accelerator.__init__, "__wrapped__")
        assert hasattr(accelerate.state.AcceleratorState.__init__, "__wrapped__")
        print("ok")
        """
    )
    env = {**__import__("os").environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


# -- the adapters, fed directly ----------------------------------------------------------------


def test_trainer_callback_reports_metrics_progress_and_phase_once(worker):
    from transformers.trainer_callback import TrainerControl, TrainerState

    from notebook_launcher.integrations.transformers import NotebookCallback

    state, control = TrainerState(max_steps=4, num_train_epochs=2), TrainerControl()
    first, second = NotebookCallback(), NotebookCallback()
    for callback in (first, second):  # the Trainer calls every callback in turn
        callback.on_train_begin(None, state, control)
    for callback in (first, second):
        callback.on_epoch_begin(None, state, control)
    assert tracking._tracker.status == "training, epoch 1 of 2"
    state.global_step = 2
    logs = {"loss": 0.5, "learning_rate": 1e-3, "epoch": 0.5, "flag": True, "note": "x"}
    for callback in (first, second):
        callback.on_step_end(None, state, control)
        callback.on_log(None, state, control, logs=logs)
        callback.on_prediction_step(None, state, control)
    assert tracking._tracker.status == "evaluating"
    for callback in (first, second):
        callback.on_evaluate(None, state, control)
    assert tracking._tracker.status == "training"
    end = {
        "train_runtime": 1.0,
        "train_samples_per_second": 9.0,
        "total_flos": 3,
        "train_loss": 0.4,
    }
    state.global_step = 4
    for callback in (first, second):
        callback.on_log(None, state, control, logs=end)
        callback.on_train_end(None, state, control)
    tracking.flush()
    assert worker.records() == [(2, {"loss": 0.5, "learning_rate": 1e-3}), (4, {"train_loss": 0.4})]
    last = worker.batches()[-1]
    assert last.status == "done" and last.progress[:3] == ("train", 4, 4)


def test_fabric_logger_and_accelerate_tracker_chart_numbers(worker):
    import numpy
    import torch

    from notebook_launcher.integrations.accelerate import NotebookTracker
    from notebook_launcher.integrations.lightning import NotebookLogger

    logger = NotebookLogger()
    assert (logger.name, logger.version) == ("notebook", None)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.5, "acc": torch.tensor(0.25), "tag": "x"}, step=numpy.int64(3))
    logger.finalize("success")
    tracker = NotebookTracker()
    tracker.store_init_configuration({"batch": 8})
    tracker.log({"loss": 0.5, "table": [1, 2], "v": torch.ones(2)}, step=7)
    assert (logger.hyperparams, tracker.config, tracker.tracker) == (
        {"lr": 0.1},
        {"batch": 8},
        None,
    )
    tracking.flush()
    assert worker.records() == [(3, {"loss": 1.5, "acc": 0.25}), (7, {"loss": 0.5})]
    assert any(batch.status == "success" for batch in worker.batches())


def test_adapters_outside_a_launch_do_nothing_and_check_their_arguments():
    from notebook_launcher.integrations.accelerate import NotebookTracker
    from notebook_launcher.integrations.lightning import NotebookLogger

    NotebookLogger().log_metrics({"loss": 1.0})
    NotebookTracker().log({"loss": 1.0})
    assert tracking._tracker is None
    with pytest.raises(TypeError, match="name=3 is not valid"):
        NotebookLogger(name=3)
    with pytest.raises(TypeError, match="version=1.5 is not valid"):
        NotebookLogger(version=1.5)
    with pytest.raises(TypeError, match="run_name=None is not valid"):
        NotebookTracker(run_name=None)
    with pytest.raises(TypeError, match="metrics=\\[1\\] is not valid: expected a dict"):
        NotebookLogger().log_metrics([1])
    with pytest.raises(TypeError, match="params='lr' is not valid"):
        NotebookLogger().log_hyperparams("lr")
    with pytest.raises(TypeError, match="status=3 is not valid"):
        NotebookLogger().finalize(3)
    with pytest.raises(TypeError, match="values=0.5 is not valid"):
        NotebookTracker().log(0.5)
    with pytest.raises(TypeError, match="device=None is not valid"):
        cpu_job_environment(None, 2)
    with pytest.raises(TypeError, match="world_size=0 is not valid"):
        cpu_job_environment("cpu", 0)


# -- one Accelerator per process -------------------------------------------------------------------


def ours_then_accelerate():
    import accelerate

    import notebook_launcher

    notebook_launcher.Accelerator()
    accelerate.Accelerator()


def accelerate_then_ours():
    import accelerate

    import notebook_launcher

    accelerate.Accelerator()
    notebook_launcher.Accelerator()


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (ours_then_accelerate, "notebook_launcher.Accelerator already runs in this process"),
        (accelerate_then_ours, "accelerate.Accelerator already runs in this process"),
    ],
)
def test_accelerate_and_our_accelerator_in_one_process_are_refused(function, message):
    import accelerate  # noqa: F401 (imported once here, not by every forked worker)

    with pytest.raises(RuntimeError, match=message):
        notebook_launcher(function, num_processes=2, output="none", ui="none")


def test_accelerate_helpers_without_its_accelerator_do_not_block_ours():
    """Accelerate's PartialState alone (its collectives, split_between_processes) is no
    Accelerator: ours may be created beside it; its Accelerator is refused, in any process."""
    import accelerate
    from accelerate.state import AcceleratorState as TheirAcceleratorState

    from notebook_launcher.state import AcceleratorState, mixing, reset_state

    try:
        accelerate.PartialState(cpu=True)
        assert not mixing.accelerate_state_exists()
        AcceleratorState(_from_accelerator=True)
        assert mixing.our_state_exists()
        reset_state()
        accelerate.Accelerator(cpu=True)
        assert mixing.accelerate_state_exists()
        with pytest.raises(RuntimeError, match="accelerate.Accelerator already runs"):
            AcceleratorState(_from_accelerator=True)
        assert not mixing.our_state_exists()  # nothing half-made
    finally:
        TheirAcceleratorState._reset_state(reset_partial_state=True)
        reset_state()
