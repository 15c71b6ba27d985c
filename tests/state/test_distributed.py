"""The state in real worker processes started by notebook_launcher (gloo on CPU)."""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from notebook_launcher import notebook_launcher
from notebook_launcher.state import AcceleratorState, DistributedType, PartialState
from notebook_launcher.utils.kwargs import DistributedDataParallelKwargs, InitProcessGroupKwargs


def _group_timeout() -> float:
    group = dist.distributed_c10d._get_default_group()
    return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()


def identity():
    state = PartialState(**InitProcessGroupKwargs(timeout=timedelta(seconds=123)).to_kwargs())
    accelerator_state = AcceleratorState(_from_accelerator=True)
    total = torch.tensor([state.process_index + 1.0])
    dist.all_reduce(total)
    return {
        "distributed_type": state.distributed_type,
        "backend": state.backend,
        "group_backend": dist.get_backend(),
        "world": dist.get_world_size(),
        "ranks": (state.num_processes, state.process_index, state.local_process_index),
        "flags": (state.is_main_process, state.is_local_main_process, state.is_last_process),
        "use_distributed": state.use_distributed,
        "device": str(state.device),
        "repr": repr(state),
        "mixed_precision": accelerator_state.mixed_precision,
        "timeout": _group_timeout(),
        "sum": total.item(),
    }


def test_two_workers_form_one_gloo_group_without_cpu_true():
    result = notebook_launcher(identity, num_processes=2, mixed_precision="bf16")
    for rank, seen in enumerate(result):
        assert seen["distributed_type"] is DistributedType.MULTI_CPU
        assert seen["backend"] == seen["group_backend"] == "gloo"
        assert seen["world"] == 2 and seen["sum"] == 3.0  # both ranks in one group
        assert seen["ranks"] == (2, rank, rank)
        assert seen["flags"] == (rank == 0, rank == 0, rank == 1)
        assert seen["use_distributed"] and seen["device"] == "cpu"
        assert seen["repr"].startswith("Distributed environment: MULTI_CPU  Backend: gloo\n")
        assert f"Process index: {rank}\n" in seen["repr"]
        assert seen["mixed_precision"] == "bf16"  # the launch's setting reaches the state
        assert seen["timeout"] == 123.0  # InitProcessGroupKwargs reached the process group


def single_worker():
    state = PartialState()
    state.wait_for_everyone()
    ran = state.on_process(process_index=0)(lambda: "ran")()
    return state.distributed_type, state.num_processes, state.use_distributed, ran


def test_a_single_launched_worker_has_a_group_of_one():
    # As Accelerate does for a launched job: the group exists, but nothing is distributed.
    assert notebook_launcher(single_worker, num_processes=1).main == (
        DistributedType.MULTI_CPU,
        1,
        False,
        "ran",
    )


def _log(path, state, what):
    with open(path, "a") as log:  # O_APPEND: each line lands whole, in the order written
        log.write(f"{state.process_index} {what} {time.time()}\n")


def ordering(path):
    state = PartialState(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=77))])
    for name, block in (
        ("main", state.main_process_first),
        ("local", state.local_main_process_first),
    ):
        with block():
            _log(path, state, f"{name}-enter")
            time.sleep(0.3 if state.process_index == 0 else 0.0)
            _log(path, state, f"{name}-exit")
    if state.is_last_process:
        time.sleep(0.4)
    before = time.time()
    state.wait_for_everyone()
    return before, time.time(), _group_timeout()


def test_main_process_goes_first_and_wait_for_everyone_is_a_barrier(tmp_path):
    path = tmp_path / "log"
    result = notebook_launcher(ordering, args=(str(path),), num_processes=3)
    events = [line.split() for line in path.read_text().splitlines()]
    for name in ("main", "local"):
        lines = [(int(rank), what, float(t)) for rank, what, t in events if what.startswith(name)]
        assert lines[:2] == [(0, f"{name}-enter", lines[0][2]), (0, f"{name}-exit", lines[1][2])]
        others = lines[2:]
        assert sorted(rank for rank, what, _ in others if what.endswith("enter")) == [1, 2]
        assert all(t >= lines[1][2] for _, _, t in others)  # nobody entered before rank 0 left
    last_arrival = result[2][0]
    assert all(after >= last_arrival for _, after, _ in result)
    assert result[0][1] - result[0][0] > 0.2  # rank 0 really waited for the late rank
    assert {timeout for _, _, timeout in result} == {77.0}  # kwargs_handlers reached the group


def decorated(path):
    state = PartialState()
    accelerator_state = AcceleratorState(_from_accelerator=True)
    ran = []

    @state.on_main_process
    def main():
        ran.append("main")
        return "main-result"

    @state.on_local_main_process
    def local_main():
        ran.append("local_main")

    @state.on_last_process
    def last():
        ran.append("last")

    @state.on_process(process_index=1)
    def one():
        ran.append("process1")

    @state.on_local_process(local_process_index=2)
    def local_two():
        ran.append("local2")

    @accelerator_state.on_process(process_index=2)
    def two():
        ran.append("accelerator_state2")

    @state.on_main_process()
    def main_with_parentheses():
        ran.append("main()")

    returned = main()
    local_main(), last(), one(), local_two(), two(), main_with_parentheses()
    state.print(f"printed by {state.process_index}")
    with pytest.raises(ValueError, match="process_index=3.*numbered 0 to 2"):
        state.on_process(process_index=3)(print)
    state.wait_for_everyone()
    state.destroy_process_group()
    return ran, returned, main.__name__, dist.is_initialized()


def test_decorators_pick_the_right_rank(capsys):
    result = notebook_launcher(decorated, args=(None,), num_processes=3)
    assert result[0] == (["main", "local_main", "main()"], "main-result", "main", False)
    assert result[1] == (["process1"], None, "main", False)
    assert result[2] == (["last", "local2", "accelerator_state2"], None, "main", False)
    out = capsys.readouterr().out
    assert "printed by 0" in out
    assert "printed by 1" not in out and "printed by 2" not in out


CASES = {
    "list": list("ABCDE"),
    "tuple": (1, 2, 3, 4, 5),
    "short": ["only"],
    "empty": [],
    "tensor": torch.arange(10).reshape(5, 2),
    "empty_tensor": torch.empty(0, 2),
    "dict": {"ids": [1, 2, 3, 4, 5], "x": torch.arange(5.0)},
}


def split_everything():
    state = PartialState()
    shares = {}
    for name, data in CASES.items():
        for padding in (False, True):
            with state.split_between_processes(data, apply_padding=padding) as share:
                shares[name, padding] = share
    padded = shares["tensor", True]  # padding gives every rank one shape: gather works
    gathered = [torch.empty_like(padded) for _ in range(state.num_processes)]
    dist.all_gather(gathered, padded)
    shares["gathered"] = torch.cat(gathered)
    return shares


def _flat(parts):
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts)
    return type(parts[0])(x for part in parts for x in part)


@pytest.mark.parametrize("n", [2, 3])
def test_split_between_processes(n):
    result = notebook_launcher(split_everything, num_processes=n)
    expected = {
        2: {
            ("list", False): [list("ABC"), list("DE")],
            ("list", True): [list("ABC"), list("DEE")],
            ("tuple", True): [(1, 2, 3), (4, 5, 5)],
            ("short", False): [["only"], []],
            ("short", True): [["only"], ["only"]],
        },
        3: {
            ("list", False): [list("AB"), list("CD"), ["E"]],
            ("list", True): [list("AB"), list("CD"), list("EE")],
            ("tuple", True): [(1, 2), (3, 4), (5, 5)],
            ("short", False): [["only"], [], []],
            ("short", True): [["only"]] * 3,
        },
    }[n]
    for key, shares in expected.items():
        assert [r[key] for r in result] == shares, key
    for padding in (False, True):
        assert [r["empty", padding] for r in result] == [[]] * n
        assert all(r["empty_tensor", padding].shape == (0, 2) for r in result)
    for name in ("list", "tuple", "tensor"):
        data = CASES[name]
        plain = [r[name, False] for r in result]
        padded = [r[name, True] for r in result]
        flat = _flat(plain)
        assert flat.tolist() == data.tolist() if name == "tensor" else flat == data
        assert {len(p) for p in padded} == {math.ceil(len(data) / n)}
    dict_shares = [r["dict", False] for r in result]
    assert _flat([d["ids"] for d in dict_shares]) == CASES["dict"]["ids"]
    assert torch.equal(_flat([d["x"] for d in dict_shares]), CASES["dict"]["x"])
    gathered = result[0]["gathered"]
    assert torch.equal(gathered, _flat([r["tensor", True] for r in result]))
    assert gathered.shape[0] == n * math.ceil(5 / n)


def ddp_with_hooks():
    from torch.nn.parallel import DistributedDataParallel as DDP

    state = PartialState()
    hooks = {}
    for hook, options in (("fp16", {}), ("power_sgd", {"matrix_approximation_rank": 1})):
        torch.manual_seed(0)
        settings = DistributedDataParallelKwargs(comm_hook=hook, comm_state_option=options)
        model = DDP(torch.nn.Linear(4, 3), **settings.to_kwargs())
        settings.register_comm_hook(model)
        torch.manual_seed(1 + state.process_index)  # each rank sees different data
        model(torch.randn(8, 4)).pow(2).sum().backward()
        grad = model.module.weight.grad
        hooks[hook] = (model._get_ddp_logging_data().get("comm_hook"), grad.clone())
    return hooks


def test_ddp_communication_hooks_are_registered_and_used():
    result = notebook_launcher(ddp_with_hooks, num_processes=2)
    for hook, name in (("fp16", "fp16_compress_hook"), ("power_sgd", "powerSGD_hook")):
        (name0, grad0), (name1, grad1) = result[0][hook], result[1][hook]
        assert name0 == name1 == name
        assert torch.equal(grad0, grad1)  # the all-reduce through the hook ran on both ranks
    compressed = result[0]["fp16"][1]
    assert torch.equal(compressed, compressed.half().float())  # reduced in fp16
