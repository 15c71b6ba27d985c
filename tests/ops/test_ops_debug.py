"""Mismatched collectives: debug mode names each rank's call; without it the launcher reports them.

Nothing here may hang: debug mode raises on every rank, and without debug mode gloo either aborts
the ranks (the failure path) or they stall (the stall machinery dumps each rank's stack).
"""

from __future__ import annotations

import pytest
import torch

from notebook_launcher import (
    DistributedOperationException,
    PartialState,
    WorkersFailedError,
    WorkerStalledError,
    notebook_launcher,
    ops,
)
from notebook_launcher.backends import shared_memory


def mismatches():
    """Every rank makes calls that differ from the other rank's; each error is caught and kept."""
    rank = PartialState().process_index  # debug mode from ACCELERATE_DEBUG_MODE
    calls = {
        "ragged": lambda: ops.gather({"x": torch.ones(4 + rank, 3)}),
        "structure": lambda: ops.gather([torch.ones(2)] * (rank + 1)),
        "dtype": lambda: ops.reduce(torch.ones(2, dtype=torch.float32 if rank else torch.int64)),
        "operation": lambda: (ops.broadcast if rank else ops.reduce)(torch.ones(3)),
        "source": lambda: ops.broadcast(torch.ones(3), from_process=rank),
        "pad_ndim": lambda: ops.pad_across_processes(torch.ones([2] * (rank + 1))),
        "objects": lambda: ops.broadcast_object_list([None] * (rank + 1)),
    }
    messages = {}
    for name, call in calls.items():
        try:
            call()
        except DistributedOperationException as error:
            messages[name] = str(error)
    # Matching calls still work in debug mode after all those errors.
    messages["after"] = ops.gather(torch.tensor([rank])).tolist()
    messages["padded"] = ops.pad_across_processes(torch.ones(rank + 1)).shape[0]
    return messages


def test_debug_mode_lists_every_ranks_call_instead_of_hanging(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "1")
    results = notebook_launcher(mismatches, num_processes=2, output="none", stall_timeout=30)
    expected = {
        "ragged": ("gather(tensor={'x': float32[4, 3]})", "gather(tensor={'x': float32[5, 3]})"),
        "structure": ("gather(tensor=[float32[2]])", "gather(tensor=[float32[2], float32[2]])"),
        "dtype": ("reduce(tensor=int64[2], reduction='mean')", "float32[2]"),
        "operation": ("process 0: reduce(tensor=float32[3]", "process 1: broadcast(tensor="),
        "source": ("from_process=0)", "from_process=1)"),
        "pad_ndim": ("(tensor=float32[2], dim=0)", "(tensor=float32[2, 2], dim=0)"),
        "objects": ("<list of 1>", "<list of 2>"),
    }
    for messages in results:
        assert set(messages) == {*expected, "after", "padded"}, messages
        for name, parts in expected.items():
            text = messages[name]
            assert text.startswith("debug mode: the processes made different collective calls")
            assert "  - process 0: " in text and "  - process 1: " in text
            for part in parts:
                assert part in text, (name, part, text)
        assert "pad them first" in messages["ragged"]
        assert "pad them first" not in messages["operation"]
        assert messages["after"] == [0, 1] and messages["padded"] == 2


def ragged_gather():
    rank = PartialState(debug=True).process_index
    return ops.gather({"x": torch.ones(4 + rank, 3)})


def test_debug_mode_error_reaches_the_kernel_with_its_own_type():
    with pytest.raises(DistributedOperationException) as caught:
        notebook_launcher(ragged_gather, num_processes=2, output="none", stall_timeout=30)
    text = str(caught.value)
    assert "process 0: gather(tensor={'x': float32[4, 3]})" in text
    assert "process 1: gather(tensor={'x': float32[5, 3]})" in text


def different_operations():
    rank = PartialState().process_index
    if rank == 0:
        ops.gather(torch.ones(3))
    else:
        ops.reduce(torch.ones(3))


@pytest.fixture
def over_gloo(monkeypatch):
    """Collectives over gloo: on CPU they otherwise go through shared memory, which checks
    every call's operation, size and dtype (see the test after these two)."""
    monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")


def test_without_debug_mode_a_stall_is_reported_with_every_ranks_stack(over_gloo):
    with pytest.raises(WorkerStalledError) as caught:
        notebook_launcher(different_operations, num_processes=2, output="none", stall_timeout=1.5)
    stacks = caught.value.stacks
    assert set(stacks) == {0, 1}
    assert "in gather" in stacks[0] and "in reduce" in stacks[1]
    assert "different_operations" in stacks[0] and "different_operations" in stacks[1]


def test_without_debug_mode_mismatched_shapes_fail_or_stall_but_never_hang(over_gloo):
    with pytest.raises((WorkersFailedError, WorkerStalledError)) as caught:
        notebook_launcher(ragged_gather_plain, num_processes=2, output="none", stall_timeout=1.5)
    assert "in gather" in str(caught.value) and "ragged_gather_plain" in str(caught.value)


@pytest.mark.skipif(not shared_memory.supported(), reason="needs x86-64 Linux with /dev/shm")
@pytest.mark.parametrize("name", ["different_operations", "ragged_gather_plain"])
def test_over_shared_memory_a_mismatch_is_an_error_naming_what_each_rank_did(name):
    job = globals()[name]
    with pytest.raises(ValueError, match="the ranks made different calls at step") as caught:
        notebook_launcher(job, num_processes=2, output="none", stall_timeout=30)
    text = str(caught.value)
    if job is different_operations:
        assert "rank 0: all_gather of 3 float32; rank 1: all_reduce of 3 float32" in text
    else:  # 4 and 5 rows of 3
        assert "rank 0: all_gather of 12 float32; rank 1: all_gather of 15 float32" in text
    assert job.__name__ in str(caught.value.__cause__)  # the traceback leads to the user's call


def ragged_gather_plain():
    rank = PartialState().process_index
    return ops.gather({"x": torch.ones(4 + rank, 3)})
