"""Fixtures of the multi-node tests."""

from __future__ import annotations

import pytest
from noderun import free_port


@pytest.fixture
def port() -> int:
    """A free port on 127.0.0.1 for one test's rendezvous."""
    return free_port()
