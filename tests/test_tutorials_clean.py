"""The tutorials read as tutorials: how the test run treats a cell lives in cell tags and in
tests/notebooks, never in the text a reader sees."""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_no_tutorial_cell_carries_test_harness_comments():
    marked = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "NBVAL" in source:
                marked.append(f"{path.name} cell {index}")
    assert not marked, f"test harness text in tutorials: {marked}"


def test_the_tutorial_folder_holds_only_tutorials():
    assert sorted(NOTEBOOKS.glob("*.ipynb")), "no tutorials found"
    others = [
        path.name
        for path in NOTEBOOKS.iterdir()
        if path.suffix != ".ipynb" and path.name not in {".ipynb_checkpoints"}
    ]
    assert not others, f"files that are not tutorials in notebooks/: {others}"
