"""Fixtures for the real-kernel tests: every kernel is shut down by the end of its test."""

from __future__ import annotations

import pytest
from kernelrun import Kernel


@pytest.fixture
def kernel_factory():
    """Start kernels on demand; shut each down after the test and fail on leftover processes."""
    kernels: list[Kernel] = []

    def make() -> Kernel:
        kernel = Kernel()
        kernels.append(kernel)
        return kernel

    yield make
    problems = []
    for kernel in kernels:
        problems += kernel.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def kernel(kernel_factory) -> Kernel:
    return kernel_factory()
