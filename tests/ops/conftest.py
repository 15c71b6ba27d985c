"""Every test here starts and ends with no shared state and no debug switch in the environment."""

from __future__ import annotations

import pytest

from notebook_launcher.state import reset_state


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.delenv("ACCELERATE_DEBUG_MODE", raising=False)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    reset_state()
    yield
    reset_state()
