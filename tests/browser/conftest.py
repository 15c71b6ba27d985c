"""Browser tests are skipped, with the reason, where JupyterLab, Playwright or Chromium is missing."""

from __future__ import annotations

import pytest
from helpers.jupyterlab import missing

REASON = missing()


def pytest_collection_modifyitems(config, items):
    if REASON is None:
        return
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=REASON))
