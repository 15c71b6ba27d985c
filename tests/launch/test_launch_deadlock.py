"""A rank that returned while the others wait for it in a collective: a certain deadlock, reported
within seconds (not at stall_timeout) with who returned and where each waiting rank is."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from notebook_launcher import DeadlockError, PartialState, WorkerStalledError
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.backends import shared_memory
from notebook_launcher.ops import reduce

FAST = 10.0  # seconds: the whole launch, start-up and teardown included


def returns_early_then_shared_memory():
    state = PartialState()
    reduce(torch.ones(4))  # both ranks: the exchange is set up and used once
    if state.process_index == 0:
        return "done"
    reduce(torch.ones(4))  # rank 1 alone: rank 0 will never join
    return "never"


def returns_early_then_gloo():
    state = PartialState()
    if state.process_index == 0:
        return "done"
    dist.all_reduce(torch.ones(4))
    return "never"


def returns_early_while_peer_computes():
    state = PartialState()
    if state.process_index == 1:
        time.sleep(5)  # not in a collective: not a deadlock
    return state.process_index


def _launch(function):
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        launch(function, num_processes=2, ui="none", timeout=60, stall_timeout=60)
    elapsed = time.monotonic() - started
    print(f"{function.__name__}: {type(info.value).__name__} after {elapsed:.1f} s")
    assert elapsed < FAST
    return info.value


@pytest.mark.skipif(
    not shared_memory.supported(), reason="the shared-memory exchange is x86-64 only"
)
def test_shared_memory_wait_for_a_rank_that_returned_is_a_deadlock():
    error = _launch(returns_early_then_shared_memory)

    # The waiting rank watches its peers' processes and usually raises first, naming the rank
    # that ended; else the supervisor's stack samples find the deadlock.
    message = str(error)
    if not isinstance(error, DeadlockError):
        assert "rank 0 (pid" in message and "ended while rank 1 waited for it" in message
        return
    assert isinstance(error, WorkerStalledError)
    assert error.returned == (0,) and error.ranks == (1,)
    assert message.startswith("rank 0 returned while rank 1 waited for it in a collective")
    assert "rank 1 was waiting for the other ranks in a shared-memory collective" in message
    assert "returns_early_then_shared_memory" in message
    assert "shared_memory.py" in error.stacks[1]


@pytest.mark.parametrize("function", [returns_early_then_gloo, returns_early_then_shared_memory])
def test_gloo_wait_for_a_rank_that_returned_fails_fast(monkeypatch, function):
    monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")  # every collective over gloo
    error = _launch(function)

    # gloo sees the closed connection itself (its error names rank 0); else the stack samples do.
    if isinstance(error, DeadlockError):
        assert error.returned == (0,) and error.ranks == (1,)
    else:
        notes = getattr(error, "__notes__", [])
        assert any("rank 0 had already returned" in note for note in notes), notes


def test_a_peer_computing_while_others_returned_is_not_a_deadlock():
    result = launch(returns_early_while_peer_computes, num_processes=2, ui="none", timeout=60)

    assert result.values == [0, 1]
