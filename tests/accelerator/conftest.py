"""Accelerate's own singletons, for the tests that use both packages in one process."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_accelerate_state():
    """Real Accelerate's singletons cleared around a test that uses both packages in-process."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
