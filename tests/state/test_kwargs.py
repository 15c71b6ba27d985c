"""Kwargs handlers: defaults, ``to_kwargs()``, validation, FP8 recipes and profilers."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from notebook_launcher.utils.kwargs import (
    AutocastKwargs,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)


def test_to_kwargs_returns_only_what_differs():
    assert AutocastKwargs().to_kwargs() == {}
    assert AutocastKwargs(cache_enabled=True).to_kwargs() == {"cache_enabled": True}
    assert GradScalerKwargs(backoff_factor=0.25).to_kwargs() == {"backoff_factor": 0.25}
    assert InitProcessGroupKwargs().to_kwargs() == {}
    timeout = timedelta(seconds=800)
    assert InitProcessGroupKwargs(timeout=timeout).to_kwargs() == {"timeout": timeout}
    assert InitProcessGroupKwargs(init_method="env://").to_kwargs() == {"init_method": "env://"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"backend": "gloo"},
        {"backend": None},
        {"backend": "nccl", "timeout": timedelta(seconds=5)},
        {"backend": "gloo", "timeout": timedelta(seconds=60)},
        {"init_method": "env://"},
    ],
)
def test_process_group_timeout_and_to_kwargs_match_accelerate(kwargs):
    from accelerate.utils import InitProcessGroupKwargs as Theirs

    ours, theirs = InitProcessGroupKwargs(**kwargs), Theirs(**kwargs)
    assert ours.timeout == theirs.timeout
    assert ours.to_dict() == theirs.to_dict()
    assert ours.to_kwargs() == theirs.to_kwargs()


def test_the_default_timeout_follows_the_backend_as_in_accelerate():
    assert InitProcessGroupKwargs().timeout == timedelta(seconds=600)  # backend "nccl"
    assert InitProcessGroupKwargs(backend="gloo").timeout == timedelta(seconds=1800)
    assert InitProcessGroupKwargs(backend="gloo").to_kwargs() == {
        "backend": "gloo",
        "timeout": timedelta(seconds=1800),
    }


def test_a_timeout_given_is_passed_on_even_when_it_equals_the_default():
    from accelerate.utils import InitProcessGroupKwargs as Theirs

    ten_minutes = timedelta(seconds=600)
    assert InitProcessGroupKwargs(timeout=ten_minutes).to_kwargs() == {"timeout": ten_minutes}
    assert Theirs(timeout=ten_minutes).to_kwargs() == {}  # dropped: a gloo group would wait 30 min


def test_scaler_kwargs_build_a_grad_scaler():
    scaler = torch.amp.GradScaler("cpu", **GradScalerKwargs(init_scale=1024.0).to_kwargs())
    assert scaler.get_scale() == 1024.0


def test_ddp_kwargs_leave_hook_fields_out():
    ddp = DistributedDataParallelKwargs(
        comm_hook="power_sgd", comm_wrapper="FP16", static_graph=True
    )
    assert ddp.comm_hook is DDPCommunicationHookType.POWER_SGD
    assert ddp.comm_wrapper is DDPCommunicationHookType.FP16
    assert ddp.to_kwargs() == {"static_graph": True}
    assert "comm_hook" not in ddp.to_dict()


def test_effective_timeout_follows_torch():
    from torch.distributed import constants

    assert (
        InitProcessGroupKwargs(backend="gloo").effective_timeout() == constants.default_pg_timeout
    )
    assert InitProcessGroupKwargs().effective_timeout() == timedelta(minutes=10)
    assert InitProcessGroupKwargs().effective_timeout("gloo") == timedelta(minutes=30)
    given = timedelta(seconds=5)
    assert InitProcessGroupKwargs(timeout=given).effective_timeout() == given


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: AutocastKwargs(enabled="yes"), TypeError, "enabled='yes'"),
        (lambda: AutocastKwargs(cache_enabled=1), TypeError, "cache_enabled=1"),
        (lambda: DistributedDataParallelKwargs(dim="0"), TypeError, "dim='0'"),
        (lambda: DistributedDataParallelKwargs(bucket_cap_mb=0), ValueError, "bucket_cap_mb=0"),
        (lambda: DistributedDataParallelKwargs(static_graph=None), TypeError, "static_graph=None"),
        (
            lambda: DistributedDataParallelKwargs(comm_hook="zip"),
            ValueError,
            "comm_hook='zip'.*'power_sgd'",
        ),
        (
            lambda: DistributedDataParallelKwargs(comm_wrapper="power_sgd"),
            ValueError,
            "comm_wrapper='power_sgd'.*'no', 'fp16', 'bf16'",
        ),
        (
            lambda: DistributedDataParallelKwargs(comm_state_option=[]),
            TypeError,
            "comm_state_option",
        ),
        (lambda: GradScalerKwargs(init_scale=-1.0), ValueError, "init_scale=-1.0"),
        (lambda: GradScalerKwargs(growth_factor=1.0), ValueError, "growth_factor=1.0"),
        (lambda: GradScalerKwargs(backoff_factor=2), ValueError, "backoff_factor=2"),
        (lambda: GradScalerKwargs(growth_interval=0), ValueError, "growth_interval=0"),
        (lambda: InitProcessGroupKwargs(timeout=60), TypeError, "timeout=60.*timedelta"),
        (lambda: InitProcessGroupKwargs(timeout=timedelta(0)), ValueError, "positive"),
        (lambda: InitProcessGroupKwargs(backend=1), TypeError, "backend=1"),
    ],
)
def test_validation_names_parameter_and_value(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_fp8_defaults_and_normalisation():
    recipe = FP8RecipeKwargs(fp8_format="e4m3", amax_compute_algo="MAX", backend="te")
    assert (recipe.backend, recipe.fp8_format, recipe.amax_compute_algo) == ("TE", "E4M3", "max")
    assert (recipe.margin, recipe.interval, recipe.amax_history_len) == (0, 1, 1024)
    assert recipe.override_linear_precision == (False, False, False)
    assert recipe.opt_level == "O2" and recipe.use_autocast_during_eval is False
    assert recipe.to_kwargs() == {"fp8_format": "E4M3", "amax_compute_algo": "max"}


def test_fp8_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCELERATE_FP8_FORMAT", "E5M2")
    monkeypatch.setenv("ACCELERATE_FP8_MARGIN", "2")
    monkeypatch.setenv("ACCELERATE_FP8_OVERRIDE_WGRAD", "true")
    recipe = FP8RecipeKwargs()
    assert (recipe.fp8_format, recipe.margin) == ("E5M2", 2)
    assert recipe.override_linear_precision == (False, False, True)
    assert recipe.to_kwargs() == {  # read from the environment, so not a default
        "fp8_format": "E5M2",
        "margin": 2,
        "override_linear_precision": (False, False, True),
    }
    monkeypatch.setenv("ACCELERATE_FP8_BACKEND", "cuda")
    with pytest.raises(ValueError, match="ACCELERATE_FP8_BACKEND='cuda'.*'MSAMP', 'TE'"):
        FP8RecipeKwargs()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "jax"}, "backend='jax'.*'MSAMP', 'TE'"),
        ({"fp8_format": "E3M4"}, "fp8_format='E3M4'.*'HYBRID', 'E4M3', 'E5M2'"),
        ({"amax_compute_algo": "mean"}, "amax_compute_algo='mean'.*'max', 'most_recent'"),
        ({"opt_level": "O3"}, "opt_level='O3'.*'O1', 'O2'"),
        ({"interval": 0}, "interval=0"),
    ],
)
def test_fp8_choices_are_listed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FP8RecipeKwargs(**kwargs)


def test_fp8_override_needs_three_bools():
    with pytest.raises(TypeError, match="override_linear_precision=.*three bools"):
        FP8RecipeKwargs(override_linear_precision=(True,))


@pytest.mark.parametrize(("backend", "package"), [("TE", "transformer_engine"), ("MSAMP", "msamp")])
def test_building_an_fp8_recipe_names_the_missing_package(backend, package):
    with pytest.raises(ImportError, match=f"backend='{backend}'.*needs the {package} package"):
        FP8RecipeKwargs(backend=backend).build()


def test_profiler_builds_and_profiles():
    with ProfileKwargs(activities=["cpu"], record_shapes=True).build() as profiler:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert isinstance(profiler, torch.profiler.profile)
    assert "aten::mm" in {event.key for event in profiler.key_averages()}


def test_profiler_schedule_hands_traces_over():
    traces = []
    kwargs = ProfileKwargs(
        activities=["cpu"],
        schedule_option={"wait": 0, "warmup": 1, "active": 1, "repeat": 1},
        on_trace_ready=traces.append,
    )
    with kwargs.build() as profiler:
        for _ in range(3):
            torch.ones(8, 8) @ torch.ones(8, 8)
            profiler.step()
    assert traces == [profiler]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"activities": ["gpu"]}, ValueError, "'gpu' is unknown; allowed activities are 'cpu'"),
        ({"activities": "cpu"}, TypeError, "activities='cpu'"),
        ({"schedule_option": {"wait": 1}}, ValueError, "'warmup' and 'active' are required"),
        ({"schedule_option": {"sleep": 1}}, ValueError, "'sleep' is unknown"),
        ({"schedule_option": {"wait": 0, "warmup": 0, "active": 0}}, ValueError, "active.*=0"),
        ({"on_trace_ready": "print"}, TypeError, "on_trace_ready='print'"),
        ({"with_stack": 1}, TypeError, "with_stack=1"),
    ],
)
def test_profiler_validation(kwargs, error, message):
    with pytest.raises(error, match=message):
        ProfileKwargs(**kwargs)


def test_profiler_activity_without_a_device():
    with pytest.raises(ValueError, match="'xpu' devices are not available"):
        ProfileKwargs(activities=["xpu"]).build()
