"""start_method="spawn" from a real kernel: objects defined in cells reach the workers by value."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.kernel

DEFINITIONS = r"""
import os
from notebook_launcher import notebook_launcher

class Scaled:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, value):
        return self.factor * value

def offset(rank):  # a helper the launched function uses through the cell's globals
    return 100 + rank

def work(transform, scaler):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} got {transform(rank)} and {scaler(rank)}", flush=True)
    return Scaled(transform(rank) + scaler(rank) + offset(rank))
"""

LAUNCH = r"""
result = notebook_launcher(work, args=(lambda r: r * 10, Scaled(3)), num_processes=2,
                           start_method="spawn")
print([type(value) is Scaled for value in result], [value.factor for value in result])
"""


def test_function_lambda_and_class_defined_in_cells_work_with_spawn(kernel):
    kernel.execute(DEFINITIONS, timeout=60)
    cell = kernel.execute(LAUNCH, timeout=90)

    output = cell.output()
    assert "Can't get attribute" not in output
    assert cell.error() is None, output
    lines = cell.stream("stdout").splitlines()
    assert sorted(lines[:2]) == ["[rank0] rank 0 got 0 and 0", "[rank1] rank 1 got 10 and 3"]
    assert lines[2:] == ["[True, True] [100, 114]"]
