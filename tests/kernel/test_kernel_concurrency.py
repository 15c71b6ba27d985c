"""Two kernels launching at the same moment on one machine, both with the default port."""

from __future__ import annotations

import ast

import pytest

pytestmark = pytest.mark.kernel

OVERLAPPING = r"""
import os, time
import torch
import torch.distributed as dist
from notebook_launcher import PartialState, notebook_launcher

def all_reduce_for_a_while():
    state = PartialState()
    began = time.time()
    total = torch.tensor([state.process_index + 1.0])
    dist.all_reduce(total)
    time.sleep(2)  # keep both launches' rendezvous alive at the same time
    state.wait_for_everyone()
    return (int(os.environ["MASTER_PORT"]), total.item(), began, time.time())

print(notebook_launcher(all_reduce_for_a_while, num_processes=2).values)
"""


def test_two_kernels_launching_at_once_with_the_default_port_both_succeed(kernel_factory):
    first, second = kernel_factory(), kernel_factory()
    for kernel in (first, second):  # import torch beforehand so that the launches overlap
        kernel.execute("import notebook_launcher", timeout=60)

    cells = [first.start(OVERLAPPING), second.start(OVERLAPPING)]
    for cell in cells:
        cell.finish(timeout=60)

    runs = []
    for cell in cells:
        assert cell.error() is None, cell.output()
        values = ast.literal_eval(cell.stream("stdout").strip())
        assert [total for _, total, _, _ in values] == [3.0, 3.0]
        assert values[0][0] == values[1][0]  # one rendezvous port per launch
        runs.append(values)
    (port_a, _, began_a, ended_a), (port_b, _, began_b, ended_b) = runs[0][0], runs[1][0]
    assert port_a != port_b
    assert began_a < ended_b and began_b < ended_a, "the two launches did not overlap"
