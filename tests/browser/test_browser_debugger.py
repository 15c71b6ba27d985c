"""A breakpoint in a ``%%distributed`` cell, in JupyterLab: the prompt is the cell's own input box,
named after the rank; commands typed there reach the rank, and the status table says that
rank is in the debugger while the cell waits."""

from __future__ import annotations

import pytest
from helpers.jupyterlab import notebook_page, shoot

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext notebook_launcher",
    "%%distributed -n 2\n"
    "import os\n"
    "rank = int(os.environ['RANK'])\n"
    "x = rank * 10\n"
    "if rank == 1:\n"
    "    breakpoint()\n"
    "y = x + 1\n"
    "y",
    "%distributed close",
]


def answer(page, cell, text: str) -> None:
    """Type ``text`` into the cell's input box once it shows, and press Enter."""
    box = cell.locator(".jp-Stdin-input")
    box.last.wait_for(timeout=120_000)
    box.last.fill(text)
    box.last.press("Enter")


def test_a_breakpoint_in_a_distributed_cell_prompts_in_the_cell(tmp_path, shots):
    with notebook_page(tmp_path, CELLS, name="debugging.ipynb") as (_, page):
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        cell = page.locator(".jp-Cell").nth(1)
        output = cell.locator(".jp-OutputArea")
        prompt = cell.locator(".jp-Stdin-prompt")
        prompt.last.wait_for(timeout=120_000)
        assert prompt.last.inner_text().strip() == "(Pdb rank 1)"
        answer(page, cell, "p x")
        page.wait_for_function(
            "() => document.querySelectorAll('.jp-Cell')[1].innerText.includes('[rank1] 10')",
            timeout=60_000,
        )
        cell.locator(".jp-Stdin-input").last.wait_for(timeout=60_000)
        text = output.inner_text()
        assert "[rank1] > Cell In[" in text and "[rank1] -> y = x + 1" in text, text
        # The status table says which rank the prompt is for, while the cell waits on it.
        stopped = output.locator('.nl-status tr[data-rank="1"]')
        stopped.wait_for(timeout=30_000)
        assert "in debugger" in stopped.inner_text(), output.locator(".nl-status").inner_text()
        assert "in debugger" not in output.locator('.nl-status tr[data-rank="0"]').inner_text()
        shoot(output, "debugger.png", shots)
        answer(page, cell, "c")
        page.wait_for_function(
            "() => document.querySelectorAll('.jp-Cell')[1].innerText.includes('[1, 11]')",
            timeout=60_000,
        )
