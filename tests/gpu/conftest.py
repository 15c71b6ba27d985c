"""The GPU tests: run on a machine with a CUDA GPU (``scripts/test_gpu.sh``), skipped elsewhere.

All CUDA work happens in launched workers or in child interpreters: the test process itself must
never initialise CUDA, or every later fork launch of the session would be refused.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def cuda_stays_out_of_the_test_process():
    yield
    assert not torch.cuda.is_initialized(), (
        "this test initialised CUDA in the test process: later fork launches would be refused"
    )
