"""A breakpoint in a function run by ``python -m notebook_launcher.run`` (torchrun's worker):
nobody can answer its prompt, so the rank fails at once, saying so."""

from __future__ import annotations

import sys

from noderun import processes


def test_a_breakpoint_under_notebook_launcher_run_fails_clearly():
    command = [sys.executable, "-m", "notebook_launcher.run", "jobs:stops_at_breakpoint"]

    with processes([command]) as wait:
        (finished,) = wait()

    assert finished.returncode == 1
    text = finished.stderr + finished.stdout
    assert "StdinUnavailableError: rank 0 entered the debugger" in text, text
    assert "torchrun worker, which takes no input" in text, text
