"""Joining a cluster: ``timeout`` bounds reaching it, and an address other than the cluster this
kernel joined is refused (Ray allows one per driver). The interrupt: tests/kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from notebook_launcher import ClusterError, RayCluster, notebook_launcher

UNREACHABLE = "127.0.0.1:1"  # nothing listens there: every connection is refused

JOINING = """
import sys
from notebook_launcher import RayCluster, notebook_launcher
cluster = RayCluster(address=sys.argv[1], timeout=float(sys.argv[2]))
print("joining", flush=True)
try:
    notebook_launcher(print, num_processes=1, cluster=cluster, ui="none")
except BaseException as error:
    print(type(error).__name__, error, flush=True)
    raise SystemExit(3)
"""


def _fresh_kernel(timeout: float) -> subprocess.Popen:
    """A process that has not joined any cluster, joining the unreachable address."""
    return subprocess.Popen(
        [sys.executable, "-c", JOINING, UNREACHABLE, str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": ""},
    )


def test_an_unreachable_cluster_fails_within_timeout_saying_so():
    kernel = _fresh_kernel(3)
    try:
        out, err = kernel.communicate(timeout=120)
    finally:
        kernel.kill()
    assert kernel.returncode == 3, out + err
    assert out.startswith("joining\nClusterError"), out + err
    assert f"could not reach the Ray cluster at {UNREACHABLE}" in out
    assert "within 3 s" in out and "timeout=" in out


def test_another_cluster_than_the_one_joined_is_refused(cluster):
    with pytest.raises(ClusterError) as caught:
        notebook_launcher(
            print, num_processes=1, cluster=RayCluster(address=UNREACHABLE, timeout=5), ui="none"
        )
    text = str(caught.value)
    assert f"address={UNREACHABLE!r}" in text and "another cluster" in text
    assert cluster.address.split(":")[-1] in text and "ray.shutdown()" in text
