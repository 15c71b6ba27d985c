"""Large return values: their bytes come back through shared memory, mapped rather than copied,
and no file of theirs outlives the launch, whatever happened in it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from notebook_launcher import LaunchError, PartialState
from notebook_launcher import notebook_launcher as launch
from notebook_launcher.protocol import results, shared_files

MB = 1 << 20


def result_mappings() -> list[str]:
    """Lines of /proc/self/maps for result files this process mapped (deleted once mapped)."""
    prefix = f"{shared_files.SHARED_MEMORY_PREFIX}{os.getpid()}-result-"
    with open("/proc/self/maps") as maps:
        return [line for line in maps if prefix in line]


def large_values():
    rank = PartialState().process_index
    base = torch.arange(2 * MB, dtype=torch.float32) + rank  # 8 MB
    return {
        "base": base,
        "view": base[10:20],  # shares base's storage
        "bf16": torch.full((MB,), rank + 0.5, dtype=torch.bfloat16),
        "transposed": (torch.arange(1024 * 512, dtype=torch.float64).view(1024, 512) + rank).t(),
        "array": np.full(MB // 4, rank, dtype=np.int64),
        "small": torch.ones(3) * rank,
        "text": f"rank {rank}",
    }


def test_large_values_come_back_mapped_from_shared_memory_and_no_file_stays():
    result = launch(large_values, num_processes=2, ui="none")

    for rank, value in enumerate(result):
        assert torch.equal(value["base"], torch.arange(2 * MB, dtype=torch.float32) + rank)
        assert torch.equal(value["view"], value["base"][10:20])
        view_storage = value["view"].untyped_storage().data_ptr()
        assert view_storage == value["base"].untyped_storage().data_ptr()  # still one storage
        assert value["bf16"].dtype == torch.bfloat16
        assert torch.equal(value["bf16"], torch.full((MB,), rank + 0.5, dtype=torch.bfloat16))
        assert value["transposed"].stride() == (1, 512)
        expected = (torch.arange(1024 * 512, dtype=torch.float64).view(1024, 512) + rank).t()
        assert torch.equal(value["transposed"], expected)
        np.testing.assert_array_equal(value["array"], np.full(MB // 4, rank, dtype=np.int64))
        assert torch.equal(value["small"], torch.ones(3) * rank)
        assert value["text"] == f"rank {rank}"
    # Three large pieces per rank (base, bf16 and transposed's storage, the array), each mapped
    # from a file that is already unlinked; nothing of them is left in /dev/shm.
    mapped = result_mappings()
    assert len(mapped) >= 2 * 4 and all(line.rstrip().endswith("(deleted)") for line in mapped)
    assert shared_files.leftover_files(os.getpid()) == []
    del result, value
    import gc

    gc.collect()
    assert result_mappings() == []  # freeing the values unmaps their memory


def test_a_large_value_travels_beside_its_pickle_not_inside_it():
    tensor = torch.arange(4 * MB, dtype=torch.int32)  # 16 MB
    payload = results.dumps({"t": tensor, "n": 1}, os.getpid())
    try:
        assert len(payload) < 4096
        (path,) = shared_files.leftover_files(os.getpid())
        assert os.path.getsize(path) == tensor.nbytes
        received = results.receive(payload)
        assert shared_files.leftover_files(os.getpid()) == []  # unlinked once mapped
        value = received.load()
    finally:
        shared_files.remove_leftovers(os.getpid())
    assert torch.equal(value["t"], tensor) and value["n"] == 1
    value["t"][0] = 7  # the kernel's copy is its own, writable memory
    assert tensor[0] == 0


def test_without_a_kernel_pid_everything_travels_inside_the_pickle():
    tensor = torch.ones(MB // 2)  # 2 MB
    payload = results.dumps(tensor)
    assert len(payload) > tensor.nbytes
    assert shared_files.leftover_files(os.getpid()) == []
    assert torch.equal(results.receive(payload).load(), tensor)


def test_when_shared_memory_cannot_hold_a_piece_it_travels_inside_the_pickle():
    # A file size limit makes reserving the file fail, as a full /dev/shm would.
    script = textwrap.dedent(
        """
        import os, resource, signal, torch
        from notebook_launcher.protocol import results, shared_files
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        tensor = torch.arange(1 << 20, dtype=torch.float32)  # 4 MB, over the limit
        payload = results.dumps(tensor, os.getpid())
        assert len(payload) > tensor.nbytes, len(payload)
        assert shared_files.leftover_files(os.getpid()) == []
        assert torch.equal(results.receive(payload).load(), tensor)
        print("in the pickle")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "in the pickle" in done.stdout


def written_then_dead():
    rank = PartialState().process_index
    if rank == 1:
        # The result is in shared memory but its event never leaves: the rank dies first.
        results.dumps(torch.zeros(2 * MB), os.getppid())
        os._exit(3)
    return torch.zeros(2 * MB)


def test_files_of_a_rank_that_died_before_sending_its_result_are_removed():
    with pytest.raises(LaunchError, match="rank 1"):
        launch(written_then_dead, num_processes=2, ui="none")
    assert shared_files.leftover_files(os.getpid()) == []
    assert result_mappings() == []


def add_one_in_place(tensor, array):
    tensor.add_(1)
    array += 1
    return float(tensor[0]), float(array[0])


def test_a_returned_value_passed_to_a_later_fork_launch_stays_the_kernels_own():
    (value,) = launch(lambda: {"t": torch.zeros(MB), "a": np.zeros(MB // 8)}, num_processes=1)
    tensor, array = value["t"], value["a"]
    array[1] = 5  # the kernel may write into what it got back
    seen = launch(add_one_in_place, args=(tensor, array), num_processes=2, ui="none")
    assert seen.values == [(1.0, 1.0), (1.0, 1.0)]  # each worker changed its own copy
    assert float(tensor.abs().sum()) == 0.0 and array[0] == 0 and array[1] == 5
