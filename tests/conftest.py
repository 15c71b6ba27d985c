"""Shared fixtures: every test must leave no worker process, listening port or shared-memory
file behind."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import psutil
import pytest
from helpers.processtree import live_descendants

from notebook_launcher.protocol import shared_files
from notebook_launcher.state import reset_state

# The tests of the worker-side packages run in this process as a rank would: each starts and ends
# with no shared state (PartialState, AcceleratorState, GradientState) and none of the variables
# that would make the state read a launch's environment.
FRESH_STATE_FOLDERS = {"accelerator", "data", "ops", "state"}
STATE_VARIABLES = (
    "ACCELERATE_DEBUG_MODE",
    "ACCELERATE_MIXED_PRECISION",
    "ACCELERATE_USE_CPU",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)


def pytest_configure(config):
    # A run started in the background of a non-interactive shell (`./dev test &`) inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler. A Jupyter kernel always has
    # one, and the interrupt tests send SIGINT as a notebook's stop button does: give it back.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """The Ray lane runs last: once this process has been a Ray driver, Ray's threads live on in
    it, and a worker forked from it afterwards (every local launch test forks) may crash."""
    items.sort(key=lambda item: "tests/ray/" in item.nodeid.replace("\\", "/"))


@pytest.fixture(autouse=True)
def worker_side_state(request):
    """The worker-side folders' tests get :func:`fresh_state`."""
    tests = os.path.dirname(os.path.abspath(__file__))
    if os.path.relpath(str(request.path), tests).split(os.sep)[0] in FRESH_STATE_FOLDERS:
        request.getfixturevalue("fresh_state")


@pytest.fixture
def fresh_state(monkeypatch):
    """No shared state and no state-related environment, before and after the test."""
    for name in STATE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("ACCELERATE_FP8_")]:
        monkeypatch.delenv(name)
    reset_state()
    yield
    reset_state()


@pytest.fixture
def kernel_factory():
    """Start real ipykernels on demand; shut each down after the test, which fails if one left a
    process behind."""
    kernelrun = pytest.importorskip(
        "helpers.kernelrun", reason="the real-kernel tests need ipykernel and jupyter_client"
    )
    kernels = []

    def make():
        kernels.append(kernelrun.Kernel())
        return kernels[-1]

    yield make
    problems = []
    for started in kernels:
        problems += started.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def kernel(kernel_factory):
    """A real ipykernel for the test (see :func:`kernel_factory`)."""
    return kernel_factory()


@pytest.fixture(autouse=True, scope="session")
def private_tmpdir(tmp_path_factory):
    """Send every temporary file of the session, subprocesses included, to pytest's own folder.

    torchrun (torch elastic) leaves a ``torchelastic_*`` folder behind per run; with TMPDIR here
    they live with pytest's temporary folders instead of piling up in the system's.
    """
    folder = tmp_path_factory.mktemp("tmpdir")
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    yield folder
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    tempfile.tempdir = None


def listening_ports() -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test if it leaves a child process, a listening socket or a shared-memory file."""
    ports_before = listening_ports()
    yield
    exchange_files = shared_files.leftover_files(os.getpid())
    assert not exchange_files, f"shared-memory files left behind: {exchange_files}"
    deadline = time.monotonic() + 2.0
    while live_descendants() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = live_descendants()
    for proc in left:
        proc.kill()
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"
    new_ports = listening_ports() - ports_before
    assert not new_ports, f"ports left listening: {sorted(new_ports)}"
