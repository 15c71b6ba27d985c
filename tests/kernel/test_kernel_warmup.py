"""In a kernel, what the first launch would import is imported in the background after the import
of the package, and no fork (ours or anyone's) happens while that is under way."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.kernel

CHECK = r"""
import sys, threading, time
import notebook_launcher
started = [t.name for t in threading.enumerate() if t.name == "notebook_launcher-warmup"]
deadline = time.monotonic() + 60
while "torch._dynamo" not in sys.modules and time.monotonic() < deadline:
    time.sleep(0.05)
print("warm-up thread:", bool(started), "| dynamo imported without a launch:", "torch._dynamo" in sys.modules)
import psutil
print("widgets imported without a launch:", "ipywidgets" in sys.modules)
janitors = [p for p in psutil.Process().children() if "janitor.py" in " ".join(p.cmdline())]
print("janitors without a launch:", len(janitors))
"""

FORK_AT_ONCE = r"""
import os, sys
import notebook_launcher
pid = os.fork()  # somebody else's fork, while the warm-up may still be importing
if pid == 0:
    import torch._dynamo  # would block forever on an inherited import lock
    os._exit(0)
_, status = os.waitpid(pid, 0)
result = notebook_launcher.notebook_launcher(lambda: 7, num_processes=2)
print("child exit:", os.waitstatus_to_exitcode(status), "| values:", result.values)
"""


def test_import_starts_the_warm_up_in_the_background(kernel):
    cell = kernel.execute(CHECK, timeout=90)
    assert cell.error() is None, cell.traceback()
    assert "warm-up thread: True | dynamo imported without a launch: True" in cell.stream()
    # The first launch's panel needs ipywidgets: imported first, so a launch soon after pays none.
    assert "widgets imported without a launch: True" in cell.stream()
    # ... and the janitor, which the first launch would start otherwise.
    assert "janitors without a launch: 1" in cell.stream()


def test_forks_right_after_the_import_wait_for_the_warm_up(kernel):
    cell = kernel.execute(FORK_AT_ONCE, timeout=90)
    assert cell.error() is None, cell.traceback()
    assert "child exit: 0 | values: [7, 7]" in cell.stream()


def test_warm_up_can_be_turned_off(kernel):
    cell = kernel.execute(
        "import os; os.environ['NOTEBOOK_LAUNCHER_WARMUP'] = '0'\n" + CHECK.replace("60", "2"),
        timeout=90,
    )
    assert cell.error() is None, cell.traceback()
    assert "warm-up thread: False | dynamo imported without a launch: False" in cell.stream()
    assert "widgets imported without a launch: False" in cell.stream()
    assert "janitors without a launch: 0" in cell.stream()
