"""The GPU tests: run on a machine with a CUDA GPU (``scripts/test_gpu.sh``), skipped elsewhere.

All CUDA work happens in launched workers or in child interpreters: the test process itself must
never initialise CUDA, or every later fork launch of the session would be refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def cuda_stays_out_of_the_test_process():
    yield
    assert not torch.cuda.is_initialized(), (
        "this test initialised CUDA in the test process: later fork launches would be refused"
    )


@pytest.fixture
def kernel():
    """A real ipykernel running this Python (driven as ``tests/kernel`` drives one); shut down
    after the test, which fails if it left a process behind."""
    folder = str(Path(__file__).resolve().parent.parent / "kernel")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    kernelrun = pytest.importorskip(
        "kernelrun",
        reason="the real-kernel tests need ipykernel and jupyter_client (see scripts/gpu_wheels.sh)",
    )
    started = kernelrun.Kernel()
    yield started
    problems = started.close()
    assert not problems, "\n".join(problems)
