"""Browser tests are skipped, with the reason, where JupyterLab, Playwright or Chromium is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.jupyterlab import missing

REASON = missing()


def pytest_collection_modifyitems(config, items):
    if REASON is None:
        return
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=REASON))


@pytest.fixture
def shots(tmp_path):
    """Where a test puts its screenshots; copied to $NOTEBOOK_LAUNCHER_SCREENSHOTS (say docs/)
    when that is set and the test passed."""
    folder = tmp_path / "shots"
    folder.mkdir()
    yield folder
    target = os.environ.get("NOTEBOOK_LAUNCHER_SCREENSHOTS")
    if target:
        for picture in folder.iterdir():
            shutil.copy(picture, Path(target) / picture.name)
