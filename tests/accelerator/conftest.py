"""Every Accelerator test starts and ends with no shared state in this process."""

from __future__ import annotations

import pytest

from notebook_launcher.state import reset_state


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "ACCELERATE_MIXED_PRECISION",
    ):
        monkeypatch.delenv(name, raising=False)
    reset_state()
    yield
    reset_state()


@pytest.fixture
def no_accelerate_state():
    """Real Accelerate's singletons cleared around a test that uses both packages in-process."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
