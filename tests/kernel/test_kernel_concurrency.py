"""Two kernels launching at the same moment on one machine, both with the default port."""

from __future__ import annotations

import ast

import pytest

pytestmark = pytest.mark.kernel

OVERLAPPING = r"""
import os, pathlib, time
import torch
import torch.distributed as dist
from notebook_launcher import PartialState, notebook_launcher

def all_reduce_while_the_other_launch_runs(folder):
    state = PartialState()
    total = torch.tensor([state.process_index + 1.0])
    dist.all_reduce(total)
    port = os.environ["MASTER_PORT"]
    if state.process_index == 0:
        pathlib.Path(folder, port).write_text("here")
    # Both launches' rendezvous alive at once, by construction rather than by timing: every
    # rank waits (bounded) until the other launch has arrived too.
    deadline = time.monotonic() + 120
    while len(os.listdir(folder)) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the other launch never arrived")
        time.sleep(0.05)
    state.wait_for_everyone()
    return (int(port), total.item(), sorted(os.listdir(folder)))

print(notebook_launcher(all_reduce_while_the_other_launch_runs, args=(FOLDER,), num_processes=2).values)
"""


def test_two_kernels_launching_at_once_with_the_default_port_both_succeed(kernel_factory, tmp_path):
    first, second = kernel_factory(), kernel_factory()
    for kernel in (first, second):  # import torch beforehand so that the launches overlap
        kernel.execute("import notebook_launcher", timeout=60)

    code = f"FOLDER = {str(tmp_path)!r}\n" + OVERLAPPING
    cells = [first.start(code), second.start(code)]
    for cell in cells:
        cell.finish(timeout=180)

    runs = []
    for cell in cells:
        assert cell.error() is None, cell.output()
        values = ast.literal_eval(cell.stream("stdout").strip())
        assert [total for _, total, _ in values] == [3.0, 3.0]
        assert values[0][0] == values[1][0]  # one rendezvous port per launch
        runs.append(values)
    (port_a, _, seen_a), (port_b, _, seen_b) = runs[0][0], runs[1][0]
    assert port_a != port_b
    # Each launch saw the other's mark while its own rendezvous was up: they overlapped.
    assert seen_a == seen_b == sorted([str(port_a), str(port_b)])
