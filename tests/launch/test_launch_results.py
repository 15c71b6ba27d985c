"""Real 2-process launches: what comes back to the caller and what the workers see."""

from __future__ import annotations

import os
import sys
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist

from notebook_launcher import DistributedType, LaunchResult, PartialState, debug_launcher
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.utils.environment import available_cpu_count

Pair = namedtuple("Pair", ["first", "second"])

TORCHRUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def rank_and_scaled(factor):
    rank = int(os.environ["RANK"])
    return {"rank": rank, "scaled": rank * factor}


def test_values_come_back_in_rank_order():
    result = launch(rank_and_scaled, args=(10,), num_processes=2)

    assert isinstance(result, LaunchResult)
    assert len(result) == 2
    assert result.values == [{"rank": 0, "scaled": 0}, {"rank": 1, "scaled": 10}]
    assert list(result) == result.values
    assert result[1] == {"rank": 1, "scaled": 10}
    assert result.main == {"rank": 0, "scaled": 0}
    assert result.main is result[0]
    assert not result.returned_nothing
    assert result.restarts == 0
    assert result.duration > 0
    assert "0: {'rank': 0, 'scaled': 0}" in repr(result)
    assert "1: {'rank': 1, 'scaled': 10}" in repr(result)


def nested_tensors():
    rank = int(os.environ["RANK"])
    weight = torch.full((2,), float(rank), requires_grad=True)
    doubled = weight * 2  # part of an autograd graph
    return {
        "tensor": doubled,
        "list": [torch.arange(3) + rank, "text", 7],
        "pair": Pair(torch.tensor([rank]), {"deep": [torch.ones(1) * rank]}),
    }


def test_tensors_nested_in_containers_come_back_on_cpu():
    result = launch(nested_tensors, num_processes=2)

    for rank, value in enumerate(result):
        assert set(value) == {"tensor", "list", "pair"}
        tensor = value["tensor"]
        assert isinstance(tensor, torch.Tensor)
        assert tensor.device.type == "cpu"
        assert not tensor.requires_grad  # detached before it was sent
        assert torch.equal(tensor, torch.full((2,), 2.0 * rank))
        assert isinstance(value["list"], list)
        assert torch.equal(value["list"][0], torch.arange(3) + rank)
        assert value["list"][1:] == ["text", 7]
        pair = value["pair"]
        assert type(pair) is Pair
        assert torch.equal(pair.first, torch.tensor([rank]))
        deep = pair.second["deep"][0]
        assert deep.device.type == "cpu"
        assert torch.equal(deep, torch.ones(1) * rank)


def returns_nothing():
    x = 1 + 1  # noqa: F841


def test_function_returning_none():
    result = launch(returns_nothing, num_processes=2)

    assert result.values == [None, None]
    assert result.main is None
    assert result.returned_nothing
    assert repr(result) == "LaunchResult(2 processes, each returned None)"


def none_on_rank_0_only():
    return None if os.environ["RANK"] == "0" else "something"


def test_one_rank_returning_something_is_not_returned_nothing():
    result = launch(none_on_rank_0_only, num_processes=2)

    assert result.values == [None, "something"]
    assert not result.returned_nothing
    assert "each returned None" not in repr(result)


def all_reduce_through_partial_state():
    state = PartialState()  # no cpu=True: the launched job must still get a gloo group
    tensor = torch.tensor([float(state.process_index + 1), 10.0])
    dist.all_reduce(tensor)
    gathered = [torch.zeros(1, dtype=torch.long) for _ in range(state.num_processes)]
    dist.all_gather(gathered, torch.tensor([state.process_index * 100]))
    state.wait_for_everyone()
    return {
        "sum": tensor.tolist(),
        "gathered": [int(t.item()) for t in gathered],
        "backend": dist.get_backend(),
        "world": dist.get_world_size(),
        "num_processes": state.num_processes,
        "process_index": state.process_index,
        "local_process_index": state.local_process_index,
        "device": state.device,
        "is_main_process": state.is_main_process,
        "is_local_main_process": state.is_local_main_process,
        "distributed_type": state.distributed_type,
        "same_state": PartialState().process_index == state.process_index,
    }


def test_all_reduce_and_partial_state_fields():
    result = launch(all_reduce_through_partial_state, num_processes=2)

    for rank, value in enumerate(result):
        assert value["sum"] == [3.0, 20.0]  # 1 + 2 and 10 + 10: both ranks took part
        assert value["gathered"] == [0, 100]
        assert value["backend"] == "gloo"
        assert value["world"] == 2
        assert value["num_processes"] == 2
        assert value["process_index"] == rank
        assert value["local_process_index"] == rank
        assert value["device"] == torch.device("cpu")
        assert value["is_main_process"] is (rank == 0)
        assert value["is_local_main_process"] is (rank == 0)
        assert value["distributed_type"] == DistributedType.MULTI_CPU
        assert value["same_state"]


def torchrun_environment():
    return {name: os.environ.get(name) for name in TORCHRUN_VARIABLES}


def test_workers_get_the_torchrun_environment():
    callers_environment = torchrun_environment()
    result = launch(torchrun_environment, num_processes=2, master_addr="127.0.0.1")

    port = result[0]["MASTER_PORT"]
    assert port is not None and port.isdigit() and 0 < int(port) < 65536
    for rank, env in enumerate(result):
        assert env == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "GROUP_RANK": "0",
        }
    assert torchrun_environment() == callers_environment  # the caller's is left untouched


def thread_settings():
    return torch.get_num_threads(), os.environ["OMP_NUM_THREADS"]


def test_threads_default_to_cores_divided_by_processes():
    two = launch(thread_settings, num_processes=2)
    expected = max(1, usable_cores() // 2)
    assert two.values == [(expected, str(expected))] * 2

    one = launch(thread_settings, num_processes=1)
    assert one.values == [(usable_cores(), str(usable_cores()))]

    three = launch(thread_settings, num_processes=3)
    expected = max(1, usable_cores() // 3)  # never 0, even with more processes than cores
    assert three.values == [(expected, str(expected))] * 3


@pytest.mark.skipif(available_cpu_count() < 2, reason="needs a count above the default of 1")
def test_threads_per_process_is_honoured():
    cores = available_cpu_count()  # the most allowed; the default for 2 ranks is cores // 2
    result = launch(thread_settings, num_processes=2, threads_per_process=cores)

    assert result.values == [(cores, str(cores)), (cores, str(cores))]


def test_debug_launcher_runs_on_cpu_and_returns_results():
    result = debug_launcher(all_reduce_through_partial_state, num_processes=2)

    assert isinstance(result, LaunchResult)
    assert [value["process_index"] for value in result] == [0, 1]
    assert all(value["sum"] == [3.0, 20.0] for value in result)
    assert all(value["device"] == torch.device("cpu") for value in result)


def test_debug_launcher_passes_args():
    result = debug_launcher(rank_and_scaled, args=(5,))

    assert result.values == [{"rank": 0, "scaled": 0}, {"rank": 1, "scaled": 5}]


def test_class_defined_in_main_comes_back_as_the_same_class(monkeypatch):
    """A dataclass defined in a notebook cell lives in ``__main__``: results must be its instances."""

    @dataclass
    class Metrics:
        rank: int
        loss: float

    Metrics.__module__ = "__main__"
    Metrics.__qualname__ = "NotebookMetrics"
    monkeypatch.setattr(sys.modules["__main__"], "NotebookMetrics", Metrics, raising=False)

    def train():
        return Metrics(int(os.environ["RANK"]), 0.5)

    result = launch(train, num_processes=2)

    assert [type(value) for value in result] == [Metrics, Metrics]
    assert result.values == [Metrics(0, 0.5), Metrics(1, 0.5)]


@pytest.mark.xfail(
    strict=True,
    reason="under fork a class defined inside a function is pickled by value by the worker, so "
    "the caller gets an instance of a copy of the class (isinstance and == fail); spawn keeps it",
)
def test_local_class_instance_comes_back_as_the_same_class_under_fork():
    @dataclass
    class Local:
        value: int

    result = launch(lambda: Local(int(os.environ["RANK"])), num_processes=2)

    assert type(result.main) is Local
    assert result.values == [Local(0), Local(1)]
