"""The shared-memory gradient all-reduce, across real ranks on this machine.

The suite's no-leak check (conftest) also fails any test that leaves an exchange file behind.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from notebook_launcher import Accelerator, PartialState, notebook_launcher
from notebook_launcher.backends import shared_memory
from notebook_launcher.launch.errors import WorkersFailedError
from notebook_launcher.protocol import shared_files

pytestmark = pytest.mark.skipif(
    not shared_memory.supported(), reason="the exchange needs x86-64 Linux with /dev/shm"
)

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool)


def values(rank: int, dtype: torch.dtype, count: int) -> torch.Tensor:
    """Rank ``rank``'s input: exact in every dtype, different on every rank."""
    return (torch.arange(count) % 7 + 10 * rank + (rank == 0)).to(dtype)


def exchange_everything(needed_bytes):
    state = PartialState()
    exchange = shared_memory.SharedMemoryExchange.create(PartialState(), needed_bytes)
    out = {"slot_bytes": exchange.slot_bytes}
    for dtype in DTYPES:
        for count in (0, 1, 37, 5000):  # 5000 elements: several chunks when slots are small
            tensor = values(state.process_index, dtype, count)
            out[(dtype, count)] = exchange.all_reduce_(tensor).clone()
            mine = values(state.process_index, dtype, count)
            gathered = torch.empty(state.num_processes * count, dtype=dtype)
            out[("gather", dtype, count)] = exchange.all_gather_(gathered, mine)
            last = state.num_processes - 1
            out[("broadcast", dtype, count)] = exchange.broadcast_(mine.clone(), last)
    halves = exchange.all_reduce_(torch.full((1000,), 2.0 * (state.process_index + 1)), 2)
    out["divided"] = halves
    out["errors"] = []
    for bad in (torch.ones(4, 4).t(), [1.0], torch.ones(2, dtype=torch.float32)):
        try:
            exchange.all_reduce_(bad, divisor=0 if isinstance(bad, torch.Tensor) else None)
        except (TypeError, ValueError) as error:
            out["errors"].append(str(error))
    for needed, timeout in ((0, 1.0), (64, -1.0)):
        try:
            shared_memory.SharedMemoryExchange.create(PartialState(), needed, timeout)
        except (TypeError, ValueError) as error:
            out["errors"].append(str(error))
    exchange.close()
    return out


@pytest.mark.parametrize(
    ("world", "needed"), [(2, 1 << 20), (3, 1 << 20), (2, 100)], ids=["2", "3", "2-chunked"]
)
def test_sums_every_dtype_in_rank_order_on_every_rank(world, needed):
    results = notebook_launcher(exchange_everything, args=(needed,), num_processes=world)
    slot = results[0]["slot_bytes"]
    assert slot % 64 == 0 and slot <= max(needed, 64)
    for dtype in DTYPES:
        for count in (0, 1, 37, 5000):
            expected = sum(values(r, dtype, count) for r in range(world)).to(dtype)
            everyone = torch.cat([values(r, dtype, count) for r in range(world)])
            for out in results:
                assert out[(dtype, count)].dtype == dtype
                assert torch.equal(out[(dtype, count)], expected), (dtype, count)
                assert torch.equal(out[("gather", dtype, count)], everyone)
                assert torch.equal(
                    out[("broadcast", dtype, count)], values(world - 1, dtype, count)
                )
    ranks_sum = sum(range(1, world + 1))
    for out in results:
        assert torch.equal(out["divided"], torch.full((1000,), float(ranks_sum)))
        strided, listed, zero, nothing, negative = out["errors"]
        assert "tensor must be contiguous" in strided
        assert "tensor=[1.0]" in listed and "expected a CPU tensor" in listed
        assert "divisor=0" in zero and "needed_bytes=0" in nothing and "timeout=-1.0" in negative


def ddp_weights(steps):
    from torch.nn.parallel import DistributedDataParallel

    state = PartialState()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(model, DistributedDataParallel)
    hooked = [hook.__name__ for hook, _ in model._comm_hooks]
    generator = torch.Generator().manual_seed(state.process_index)
    for _ in range(steps):
        x = torch.randn(4, 8, generator=generator)
        optimizer.zero_grad()
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
    return hooked, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_through_shared_memory_gives_gloos_weights(monkeypatch, world):
    shared = notebook_launcher(ddp_weights, args=(5,), num_processes=world)
    monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")
    gloo = notebook_launcher(ddp_weights, args=(5,), num_processes=world)
    assert shared[0][0] == ["all_reduce_hook"] and gloo[0][0] == []
    for rank in range(world):
        for mine, theirs in zip(shared[rank][1], gloo[rank][1], strict=True):
            assert torch.equal(mine, theirs)  # DDP's scaling, gloo's additions: bit for bit
        for mine, rank_zero in zip(shared[rank][1], shared[0][1], strict=True):
            assert torch.equal(mine, rank_zero)


def one_rank_never_arrives(timeout):
    state = PartialState()
    exchange = shared_memory.SharedMemoryExchange.create(PartialState(), 1024, timeout=timeout)
    if state.process_index == 1:
        time.sleep(timeout + 1.5)  # busy with something else until after rank 0 gave up
        return None
    started = time.monotonic()
    try:
        exchange.all_reduce_(torch.ones(8))
    except RuntimeError as error:
        return str(error), time.monotonic() - started


def test_a_rank_that_never_arrives_is_named_after_the_timeout():
    results = notebook_launcher(one_rank_never_arrives, args=(0.5,), num_processes=2, timeout=60)
    message, waited = results[0]
    assert "rank 0 waited" in message and "rank(s) [1]" in message
    assert waited >= 0.5  # it waited the whole timeout, and gave up while rank 1 was busy


def rank_dies_while_the_other_waits():
    state = PartialState()
    exchange = shared_memory.SharedMemoryExchange.create(PartialState(), 1024)
    if state.process_index == 1:
        raise KeyError("rank 1 broke before the all-reduce")
    exchange.all_reduce_(torch.ones(8))


def test_a_rank_that_dies_fails_the_job_at_once_and_leaves_nothing():
    started = time.monotonic()
    with pytest.raises(KeyError, match="rank 1 broke"):
        notebook_launcher(rank_dies_while_the_other_waits, num_processes=2, timeout=60)
    assert time.monotonic() - started < 30


def killed_before_unlinking():
    import signal

    state = PartialState()
    if state.process_index == 0:  # create the file, as rank 0 does, and die holding it
        path = shared_memory._create_file(4096)
        assert path and os.path.exists(path)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)


def test_the_launcher_removes_the_file_of_a_rank_that_died_holding_it():
    with pytest.raises(WorkersFailedError):
        notebook_launcher(killed_before_unlinking, num_processes=2, timeout=60)
    assert not shared_files.leftover_files(os.getpid())  # the launcher removed it


def switched_off():
    return shared_memory.SharedMemoryExchange.create(PartialState(), 1024)


def test_the_switch_and_a_single_process_leave_gloo_in_charge(monkeypatch):
    assert notebook_launcher(switched_off, num_processes=1)[0] is None
    monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")
    assert list(notebook_launcher(switched_off, num_processes=2)) == [None, None]


def test_the_hook_waits_as_long_as_the_process_group_would():
    import datetime

    from notebook_launcher import InitProcessGroupKwargs

    def job():
        handler = InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=77))
        model = Accelerator(kwargs_handlers=[handler]).prepare(torch.nn.Linear(2, 2))
        return [state.timeout for _, state in model._comm_hooks]

    assert list(notebook_launcher(job, num_processes=2)) == [[77.0], [77.0]]


def backward_while_the_peer_hangs():
    model = Accelerator().prepare(torch.nn.Linear(4, 1))
    if PartialState().process_index == 1:
        time.sleep(600)  # never reaches its backward
    model(torch.ones(2, 4)).sum().backward()


def test_a_stall_in_the_gradient_exchange_names_the_rank_that_held_it_up():
    from notebook_launcher import WorkerStalledError

    with pytest.raises(WorkerStalledError) as caught:
        notebook_launcher(
            backward_while_the_peer_hangs, num_processes=2, stall_timeout=3, timeout=60
        )
    message = str(caught.value)
    assert "rank 0 was waiting for the other ranks in a shared-memory collective" in message
    assert "rank 1 was in backward_while_the_peer_hangs" in message
    assert "held up by rank 1" in message


def copied_and_saved():
    import copy
    import io

    model = Accelerator().prepare(torch.nn.Linear(2, 1))
    torch.save(model, io.BytesIO())  # DDP pickles its hooks' states: the exchange is left out
    twin = copy.deepcopy(model)  # the copy averages its gradients over gloo
    states = [hook_state for _, hook_state in twin._comm_hooks]
    x = torch.full((3, 2), float(PartialState().process_index + 1))
    twin(x).sum().backward()
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    again = copy.deepcopy(model)  # and takes a hook of the user's the way DDP does
    again.register_comm_hook(None, default_hooks.allreduce_hook)
    again(x).sum().backward()
    return states, twin.module.weight.grad, again.module.weight.grad


def test_a_prepared_model_can_be_copied_and_pickled():
    results = notebook_launcher(copied_and_saved, num_processes=2)
    for states, grad, hooked_grad in results:
        assert states == [None]
        assert torch.equal(grad, torch.full((1, 2), 4.5))  # 3 rows of (1 + 2) / 2
        assert torch.equal(hooked_grad, grad)


def users_own_hook():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    def counted(state, bucket):
        calls.append(bucket.buffer().numel())
        return default_hooks.allreduce_hook(state, bucket)

    model = Accelerator().prepare(torch.nn.Linear(2, 1))
    model.register_comm_hook(None, counted)  # after prepare, as users of Accelerate may
    try:
        model.register_comm_hook(None, counted)
    except RuntimeError as error:
        second = str(error)
    x = torch.full((3, 2), float(PartialState().process_index + 1))
    model(x).sum().backward()
    return calls, model.module.weight.grad, second


def test_a_hook_the_user_registers_after_prepare_takes_over():
    for calls, grad, second in notebook_launcher(users_own_hook, num_processes=2):
        assert calls == [3]  # one bucket: weight and bias
        assert torch.equal(grad, torch.full((1, 2), 4.5))
        assert "only be called once" in second


def mismatched_sizes():
    state = PartialState()
    exchange = shared_memory.SharedMemoryExchange.create(
        PartialState(), 1024
    )  # 256 float32 per slot
    for _ in range(50):  # chunks of 256 and 44, then 256, 256 and 188: sizes change each step
        exchange.all_reduce_(torch.ones(300))
        exchange.all_reduce_(torch.ones(700))
    try:
        exchange.all_reduce_(torch.ones(10 + state.process_index))
    except ValueError as error:
        return str(error)


def test_ranks_that_send_different_sizes_get_an_error_not_wrong_sums():
    for rank, message in enumerate(notebook_launcher(mismatched_sizes, num_processes=2)):
        other = 1 - rank
        assert "the ranks made different calls at step 251" in message
        assert f"rank {rank}: all_reduce of {10 + rank} float32" in message
        assert f"rank {other}: all_reduce of {10 + other} float32" in message
