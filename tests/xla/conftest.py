"""The XLA lanes: the torch_xla test double by default, the real torch_xla when asked.

``NOTEBOOK_LAUNCHER_XLA_LANE=real`` (set by ``scripts/test_xla.sh``) runs the same tests against
the installed torch_xla; otherwise ``fake_torch_xla/`` goes first on ``sys.path`` and
``PYTHONPATH`` for the duration of each test, so replica processes import it too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

FAKE_ROOT = str(Path(__file__).parent / "fake_torch_xla")
REAL_LANE = os.environ.get("NOTEBOOK_LAUNCHER_XLA_LANE") == "real"
# The real lane is run once per CPU_NUM_DEVICES; the default lane tries one and two replicas.
REPLICA_COUNTS = [int(os.environ["CPU_NUM_DEVICES"])] if REAL_LANE else [1, 2]


def _forget_torch_xla() -> None:
    for name in [n for n in sys.modules if n == "torch_xla" or n.startswith("torch_xla.")]:
        del sys.modules[name]


@pytest.fixture(params=REPLICA_COUNTS, ids=lambda n: f"{n}dev")
def replicas(request, monkeypatch) -> int:
    """PJRT_DEVICE=CPU with this many devices (replicas are threads of one process)."""
    monkeypatch.setenv("CPU_NUM_DEVICES", str(request.param))
    return request.param


@pytest.fixture(autouse=True)
def xla_lane(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", os.environ.get("CPU_NUM_DEVICES", "1"))
    if REAL_LANE:
        yield "real"
        return
    monkeypatch.syspath_prepend(FAKE_ROOT)
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", FAKE_ROOT + (os.pathsep + path if path else ""))
    _forget_torch_xla()
    yield "fake"
    _forget_torch_xla()


def using_test_double() -> bool:
    import torch_xla

    return bool(getattr(torch_xla, "IS_TEST_DOUBLE", False))
