"""A real ipykernel SIGKILLed with a session idle, with a call running, or while a launch's or a
session's results come back: within 5 s no file of it is left in /dev/shm and no process it
started runs, with no later launch."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from helpers.kernelrun import alive, wait_until

from notebook_launcher.protocol import shared_files

pytestmark = pytest.mark.kernel

PROMISE = 5.0  # seconds after the kill
MB = 1 << 20
LARGE = f"lambda: torch.ones(96 * {MB} // 4)"  # per rank
OPEN = (
    "import time, torch\nimport torch.distributed as dist\n"
    "from notebook_launcher import Session, notebook_launcher\n"
    "session = Session(num_processes=2, ui='none')\nsession.run(lambda: None)\n"
)
# (what the cells before do, the cell to kill the kernel in, when: "file" as soon as a result
# file is in /dev/shm, "idle" once the cell ended, else that many seconds after it started)
CASES = {
    "launch, results in /dev/shm": (
        "import torch\nfrom notebook_launcher import notebook_launcher\n",
        f"result = notebook_launcher({LARGE}, num_processes=2, ui='none')",
        "file",
    ),
    "session, results in /dev/shm": (OPEN, f"result = session.run({LARGE})", "file"),
    "session idle": (OPEN, f"result = session.run({LARGE})", "idle"),
    "session, a call waiting in a collective": (
        OPEN,
        "session.run(lambda: time.sleep(600) if dist.get_rank() == 0 else dist.barrier())",
        0.5,
    ),
}


def files_of(pid: int) -> list[str]:
    found = []
    for name in os.listdir(shared_files.SHARED_MEMORY_DIRECTORY):
        owner = shared_files.owner_of(name)
        if owner is not None and owner.pid == pid:
            found.append(name)
    return found


@pytest.mark.parametrize("case", CASES)
def test_a_killed_kernel_leaves_no_file_and_no_process_within_5_s(kernel, case):
    before, cell, moment = CASES[case]
    assert kernel.execute(before, timeout=120).error() is None
    running = kernel.start(cell)
    deadline = time.monotonic() + 120
    held = []
    if moment == "file":
        while not held:
            assert time.monotonic() < deadline and not running.done, running.output()
            running.poll(0.001)
            held = files_of(kernel.pid)
    elif moment == "idle":
        running.finish(120)
        assert running.error() is None, running.output()
    else:
        running.wait_for(lambda c: False, moment)
    started = [p.pid for p in psutil.Process(kernel.pid).children(recursive=True)]

    os.kill(kernel.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: not files_of(kernel.pid) and not alive(started), PROMISE, 0.002), (
        f"left: files {files_of(kernel.pid)}, processes {alive(started)}"
    )
    print(f"\n{case}: {len(held)} files, gone {time.monotonic() - killed:.3f} s after the kill")
    assert len(started) >= 3  # the two workers and the janitor were there
