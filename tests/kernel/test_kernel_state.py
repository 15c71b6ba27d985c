"""State created in the kernel stays in the kernel: workers start from a clean slate."""

from __future__ import annotations

import ast

import pytest

pytestmark = pytest.mark.kernel

LEAK_CHECK = r"""
from notebook_launcher import PartialState, notebook_launcher

in_kernel = PartialState()
assert in_kernel.num_processes == 1

def who_am_i():
    state = PartialState()
    return (state.num_processes, state.process_index, state.distributed_type.name)

result = notebook_launcher(who_am_i, num_processes=2, start_method=START_METHOD)
print(result.values, PartialState().num_processes)
"""


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_partial_state_of_the_kernel_does_not_leak_into_workers(kernel, start_method):
    cell = kernel.execute(LEAK_CHECK.replace("START_METHOD", repr(start_method)), timeout=90)

    assert cell.error() is None, cell.output()
    text = cell.stream("stdout").strip()
    values, kernel_processes = text.rsplit(" ", 1)
    assert ast.literal_eval(values) == [(2, 0, "MULTI_CPU"), (2, 1, "MULTI_CPU")]
    assert kernel_processes == "1"  # and the kernel's own state is untouched
