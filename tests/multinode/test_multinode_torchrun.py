"""The notebook's function under torchrun, through ``python -m notebook_launcher.run``."""

from __future__ import annotations

import sys

import pytest
import torch
from noderun import HERE, processes

from notebook_launcher.run import load_function, parse_argument

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ENTRY = ["-m", "notebook_launcher.run"]


def test_two_torchrun_nodes_run_a_notebook_function(tmp_path, port):
    commands = [
        [
            *TORCHRUN,
            "--nnodes=2",
            "--nproc_per_node=2",
            f"--node_rank={node_rank}",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            *ENTRY,
            "--results",
            str(tmp_path),
            "jobs:all_reduce",
            "3.0",
        ]
        for node_rank in (0, 1)
    ]

    with processes(commands) as wait:
        node0, node1 = wait(90)

    assert node0.returncode == 0, node0.stdout + node0.stderr
    assert node1.returncode == 0, node1.stdout + node1.stderr
    # PartialState picked up torchrun's environment: one group of 4 across both "nodes".
    assert "[rank0] sum over 4 ranks: 30" in node0.lines
    assert "[rank3] sum over 4 ranks: 30" in node1.lines
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(4)]
    assert [(r["rank"], r["local_rank"], r["node_rank"]) for r in results] == [
        (0, 0, 0),
        (1, 1, 0),
        (2, 0, 1),
        (3, 1, 1),
    ]
    assert {(r["world"], r["sum"]) for r in results} == {(4, 30.0)}


def test_a_failing_rank_under_torchrun_is_reported(port):
    command = [
        *TORCHRUN,
        "--nnodes=1",
        "--nproc_per_node=2",
        f"--master_port={port}",
        *ENTRY,
        "jobs:fail_on_rank",
        "1",
    ]

    with processes([command]) as wait:
        (finished,) = wait(90)

    assert finished.returncode != 0
    # Our report, labelled with the rank.
    assert "[rank1] notebook_launcher.run jobs:fail_on_rank: rank 1 (local rank 1, pid" in (
        finished.stderr + finished.stdout
    )
    assert "[rank1] ValueError: rank 1 gives up" in finished.lines
    # torchrun's own summary carries the exception too (recorded in its error file); which
    # failure it calls the root cause is its choice (ties within a second go to rank 0).
    summary = finished.stderr.split("notebook_launcher.run FAILED", 1)[1]
    assert "ValueError: rank 1 gives up" in summary


def test_a_plain_process_runs_the_function_as_one_rank():
    command = [
        sys.executable,
        *ENTRY,
        "--prefix",
        "<{rank}/{node_rank}> ",
        "jobs:fail_on_rank",
        "0",
    ]

    with processes([command]) as wait:
        (finished,) = wait()

    assert finished.returncode == 1
    assert "<0/0> ValueError: rank 0 gives up" in finished.lines


def test_functions_are_found_by_module_or_by_file(tmp_path):
    script = tmp_path / "train_script.py"
    script.write_text("class Trainer:\n    @staticmethod\n    def fit(x):\n        return x * 2\n")

    assert load_function("jobs:all_reduce").__name__ == "all_reduce"
    assert load_function(f"{script}:Trainer.fit")(21) == 42
    for bad in ("jobs", ":fit", "jobs:"):
        with pytest.raises(ValueError, match="module:function"):
            load_function(bad)
    with pytest.raises(ValueError, match="not callable"):
        load_function("jobs:__doc__")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3e-4", 3e-4),
        ("8", 8),
        ("[1, 2]", [1, 2]),
        ("True", True),
        ("'x'", "x"),
        ("cosine", "cosine"),
    ],
)
def test_arguments_are_python_literals_or_strings(text, value):
    assert parse_argument(text) == value


sys.path.insert(0, str(HERE))  # load_function("jobs:...") imports the jobs module
