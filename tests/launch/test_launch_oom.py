"""A rank killed by the out-of-memory killer is reported as out of memory, with its last measured
memory use: provoked for real by moving the rank into a memory cgroup with a small limit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from notebook_launcher import PartialState, WorkersFailedError, notebook_launcher
from notebook_launcher.launch.supervision.oom import killed_for_memory, memory_text, oom_kills

LIMIT = 300 << 20  # bytes the rank may use before the kernel kills it


def _own_memory_cgroup() -> Path | None:
    """This process's cgroup directory for the memory controller (v1 or v2), if writable."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            folder = Path("/sys/fs/cgroup/memory", path.lstrip("/"))
            limit = "memory.limit_in_bytes"
            break
    else:
        folder = Path("/sys/fs/cgroup", Path("/proc/self/cgroup").read_text().split("::", 1)[-1])
        limit = "memory.max"
    if (folder / limit).exists() and os.access(folder, os.W_OK):
        return folder
    return None


@pytest.fixture
def small_memory_cgroup():
    parent = _own_memory_cgroup()
    if parent is None:
        pytest.skip("needs a writable memory cgroup (root, cgroup v1 memory or v2 delegation)")
    folder = parent / f"notebook-launcher-oom-{os.getpid()}"
    try:
        folder.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a memory cgroup here ({error})")
    v1 = (folder / "memory.limit_in_bytes").exists()
    (folder / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(LIMIT))
    swap = folder / ("memory.memsw.limit_in_bytes" if v1 else "memory.swap.max")
    if swap.exists():
        swap.write_text(str(LIMIT) if v1 else "0")
    yield folder
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            folder.rmdir()
            return
        except OSError:  # its last process is still being reaped
            time.sleep(0.1)
    folder.rmdir()


def grows_until_killed(cgroup):
    state = PartialState()
    if state.process_index == 1:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
        hoard = []
        while True:  # 20 MB a step, touched, slowly enough to be measured on the way
            hoard.append(torch.ones(5 << 20))
            time.sleep(0.05)
    state.wait_for_everyone()


def test_an_oom_killed_rank_is_reported_as_out_of_memory(small_memory_cgroup):
    with pytest.raises(WorkersFailedError) as info:
        notebook_launcher(
            grows_until_killed, args=(str(small_memory_cgroup),), num_processes=2, timeout=120
        )
    failure = info.value.failure
    assert failure.rank == 1
    assert failure.exitcode == -9
    assert "killed by the out-of-memory killer" in str(info.value)
    measured = str(info.value).split("last measured memory use was ")[1].split(";")[0]
    number, unit = measured.split()
    # Measured on the way up (resident size counts the pages shared with the kernel too).
    assert unit == "GiB" or (unit == "MiB" and float(number) >= 150)


def test_a_sigkill_without_an_oom_kill_is_not_called_out_of_memory():
    assert killed_for_memory(-9, oom_kills()) in (False, None)  # no counter moved
    assert killed_for_memory(1, ()) is False
    assert killed_for_memory(-9, ()) is None or oom_kills() != ()
    assert memory_text(3 << 30) == "3.0 GiB" and memory_text(None) == "unknown"
