"""The Accelerator in one process: bad input, mixed precision, trackers, signatures."""

from __future__ import annotations

import importlib.util
import inspect
import os

import accelerate
import pytest
import torch

from notebook_launcher.accelerator import Accelerator
from notebook_launcher.accelerator.optimizer import AcceleratedOptimizer
from notebook_launcher.accelerator.scheduler import AcceleratedScheduler
from notebook_launcher.accelerator.trackers import GeneralTracker
from notebook_launcher.utils.kwargs import GradScalerKwargs, ProfileKwargs


def _params(fn):
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    ]


METHODS = [
    "prepare",
    "prepare_model",
    "prepare_optimizer",
    "prepare_scheduler",
    "prepare_data_loader",
    "backward",
    "accumulate",
    "no_sync",
    "clip_grad_norm_",
    "clip_grad_value_",
    "autocast",
    "gather",
    "gather_for_metrics",
    "reduce",
    "pad_across_processes",
    "split_between_processes",
    "wait_for_everyone",
    "print",
    "skip_first_batches",
    "unwrap_model",
    "free_memory",
    "save",
    "save_state",
    "load_state",
    "register_for_checkpointing",
    "end_training",
    "profile",
    "on_main_process",
    "on_local_main_process",
    "on_last_process",
    "on_process",
    "on_local_process",
    "main_process_first",
    "local_main_process_first",
    "get_tracker",
    "get_state_dict",
    "clear",
    "join_uneven_inputs",
    "save_model",
    "register_save_state_pre_hook",
    "register_load_state_pre_hook",
    "set_trigger",
    "check_trigger",
    "unscale_gradients",
    "trigger_sync_in_backward",
    "verify_device_map",
]
# Accelerate's parallelism ranks (data/tensor/context/pipeline), fp8_backend and the DeepSpeed,
# LOMO and context-parallel helpers have no counterpart: they need engines not provided here.
NOT_PROVIDED = {
    "context_parallel_rank",
    "data_parallel_rank",
    "data_parallel_shard_rank",
    "pipeline_parallel_rank",
    "tensor_parallel_rank",
    "fp8_backend",
    "deepspeed_ulysses_dl_adapter",
    "lomo_backward",
    "maybe_context_parallel",
}


def test_signatures_match_accelerate():
    ours, theirs = _params(Accelerator.__init__), _params(accelerate.Accelerator.__init__)
    assert [p[:2] for p in ours] == [p[:2] for p in theirs]
    for mine, other in zip(ours, theirs, strict=True):
        if mine[0] != "split_batches":  # Accelerate's default is a deprecation sentinel
            assert mine[2] == other[2], mine[0]
    for name in METHODS:
        assert _params(getattr(Accelerator, name)) == _params(
            getattr(accelerate.Accelerator, name)
        ), name
    for name in ("init_trackers", "log"):  # wrapped by a decorator in Accelerate
        theirs = inspect.signature(inspect.unwrap(getattr(accelerate.Accelerator, name)))
        wrapped = getattr(accelerate.Accelerator, name).__closure__
        function = next(c.cell_contents for c in wrapped if callable(c.cell_contents))
        assert _params(getattr(Accelerator, name)) == _params(function), name
    from accelerate.optimizer import AcceleratedOptimizer as TheirOptimizer
    from accelerate.scheduler import AcceleratedScheduler as TheirScheduler

    assert _params(AcceleratedOptimizer.__init__) == _params(TheirOptimizer.__init__)
    assert _params(AcceleratedScheduler.__init__) == _params(TheirScheduler.__init__)
    for name in ("step", "zero_grad", "state_dict", "load_state_dict"):
        assert _params(getattr(AcceleratedOptimizer, name)) == _params(
            getattr(TheirOptimizer, name)
        ), name
    del theirs


def test_every_other_public_name_of_accelerate_exists_with_its_kind():
    theirs = {n for n in dir(accelerate.Accelerator) if not n.startswith("_")}
    assert sorted(theirs - NOT_PROVIDED - set(dir(Accelerator))) == []
    for name in sorted(theirs - NOT_PROVIDED):
        other = inspect.getattr_static(accelerate.Accelerator, name)
        mine = inspect.getattr_static(Accelerator, name)
        assert isinstance(mine, property) == isinstance(other, property), name
        assert isinstance(mine, staticmethod) == isinstance(other, staticmethod), name


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"gradient_accumulation_steps": 0}, ValueError, "gradient_accumulation_steps=0"),
        ({"gradient_accumulation_steps": "2"}, TypeError, "gradient_accumulation_steps='2'"),
        ({"mixed_precision": "fp32"}, ValueError, "mixed_precision='fp32'"),
        ({"deepspeed_plugin": object()}, NotImplementedError, "deepspeed_plugin"),
        ({"fsdp_plugin": object()}, NotImplementedError, "fsdp_plugin"),
        ({"megatron_lm_plugin": object()}, NotImplementedError, "megatron_lm_plugin"),
        ({"kwargs_handlers": [object()]}, TypeError, "kwargs_handlers"),
        ({"log_with": "nope"}, ValueError, "log_with='nope'"),
        ({"log_with": "comet_ml"}, ValueError, "log_with=.comet_ml.*supported"),
        ({"log_with": "tensorboard"}, ValueError, "project_dir"),
        ({"rng_types": "torch"}, TypeError, "rng_types='torch'"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        Accelerator(**kwargs)


def test_an_optimizer_prepared_before_its_model_is_refused():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="prepared before the model"):
        accelerator.prepare(model)
    other = torch.nn.Linear(2, 2)
    both = accelerator.prepare(torch.optim.SGD(other.parameters(), lr=0.1), other)
    assert isinstance(both[0], AcceleratedOptimizer) and both[1] is other  # one call: any order
    assert accelerator.prepare("not a model") == "not a model"
    with pytest.raises(ValueError, match="device_placement"):
        accelerator.prepare(other, device_placement=[True, False])


def test_bf16_autocast_inside_and_fp32_outside():
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(3, 3)))
    x = torch.randn(2, 3)
    with accelerator.autocast():
        assert (x @ x.T).dtype == torch.bfloat16
    assert (x @ x.T).dtype == torch.float32
    assert model(x).dtype == torch.float32  # outputs come back in float32
    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert plain(x).dtype == torch.float32 and "_original_forward" not in plain.__dict__


def test_fp16_on_this_cpu_scales_and_skips_overflowing_steps():
    # torch 2.13 autocasts to float16 on CPUs and has a CPU GradScaler: fp16 really runs here.
    handler = GradScalerKwargs(init_scale=2.0**16, growth_interval=1)
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[handler])
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    assert accelerator.scaler.get_scale() == 2.0**16
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(torch.full((1, 2), 1e30)).sum())  # overflows
    optimizer.step()
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    optimizer.zero_grad()
    accelerator.backward(model(torch.ones(1, 2)).sum())
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    assert not optimizer.step_was_skipped
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_unsupported_autocast_dtype_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda device_type: False)
    with pytest.raises(ValueError, match="mixed_precision='bf16' is not supported"):
        Accelerator(mixed_precision="bf16")


def test_optimizer_and_scheduler_skip_non_sync_steps_in_one_process():
    accelerator = Accelerator(gradient_accumulation_steps=3)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    lrs = []
    for _ in range(6):
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.ones(1, 2)).sum())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25]


class Recorder(GeneralTracker):
    name = "recorder"

    def __init__(self):
        super().__init__()
        self.calls = []

    def store_init_configuration(self, values):
        self.calls.append(("config", values))

    def log(self, values, step=None, **kwargs):
        self.calls.append(("log", values, step))

    def finish(self):
        self.calls.append(("finish",))


def test_trackers_custom_notebook_and_tensorboard(tmp_path):
    recorder = Recorder()
    names = ["notebook", recorder]
    if importlib.util.find_spec("tensorboard") is not None:
        names.append("tensorboard")
    accelerator = Accelerator(log_with=names, project_dir=str(tmp_path))
    accelerator.init_trackers("run", config={"lr": 0.1})
    accelerator.log({"loss": 1.5}, step=3)  # outside a launch the notebook tracker is a no-op
    assert accelerator.get_tracker("recorder") is recorder
    assert accelerator.get_tracker("notebook").config == {"lr": 0.1}
    with pytest.raises(ValueError, match="name='missing'"):
        accelerator.get_tracker("missing")
    with pytest.raises(TypeError, match="values="):
        accelerator.log([1.0])
    accelerator.end_training()
    assert recorder.calls == [("config", {"lr": 0.1}), ("log", {"loss": 1.5}, 3), ("finish",)]
    if "tensorboard" in names:
        assert any(f.startswith("events.") for f in os.listdir(tmp_path / "run"))


def test_profile_writes_a_trace(tmp_path):
    accelerator = Accelerator(kwargs_handlers=[ProfileKwargs(output_trace_dir=str(tmp_path))])
    with accelerator.profile() as profiler:
        torch.ones(4) @ torch.ones(4)
    assert profiler is not None and (tmp_path / "profile_0.json").exists()
    with pytest.raises(TypeError, match="profile_handler"):
        with accelerator.profile(profile_handler="cpu"):
            pass
