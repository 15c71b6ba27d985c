"""Joining a Ray cluster from a real kernel: the stop button ends a join that cannot reach the
cluster at once, and the kernel goes on."""

from __future__ import annotations

import time

import pytest
from helpers.kernelrun import strip_ansi

pytestmark = pytest.mark.kernel

JOIN = """
import os
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray
from notebook_launcher import RayCluster, notebook_launcher
print("joining", flush=True)
notebook_launcher(print, num_processes=1, cluster=RayCluster(address="127.0.0.1:1", timeout=600))
"""


def test_an_interrupt_ends_a_join_that_cannot_reach_the_cluster(kernel):
    pytest.importorskip("ray")
    cell = kernel.start(JOIN)
    assert cell.wait_for(lambda c: "joining" in c.stream(), timeout=120), cell.output()
    time.sleep(2.0)  # inside the join
    interrupted = time.monotonic()
    kernel.km.interrupt_kernel()
    cell.finish(timeout=30)  # not the 600 s the join would wait
    print(f"interrupt -> join ended: {time.monotonic() - interrupted:.2f} s")
    error = cell.error()
    assert error is not None and error["ename"] == "KeyboardInterrupt", cell.output()
    # It ended the wait for the cluster, which Ray had not been asked to join yet.
    where = strip_ansi("\n".join(error["traceback"]))
    assert "joining.py" in where and "in reach" in where, where
    assert "ray/_private/worker.py" not in where, where
    assert kernel.execute("print(1 + 1)", timeout=30).stream() == "2\n"
