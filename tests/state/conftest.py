"""Every test here starts and ends with no shared state and no state-related environment."""

from __future__ import annotations

import os

import pytest

from notebook_launcher.state import reset_state

STATE_VARIABLES = (
    "ACCELERATE_DEBUG_MODE",
    "ACCELERATE_MIXED_PRECISION",
    "ACCELERATE_USE_CPU",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    for name in STATE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("ACCELERATE_FP8_")]:
        monkeypatch.delenv(name)
    reset_state()
    yield
    reset_state()
