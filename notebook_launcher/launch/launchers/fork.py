"""Fork: workers inherit the function, its arguments and the kernel's imports."""

from __future__ import annotations

import importlib
import sys

from ...protocol.names import WORKER_ENTRY
from .base import Launcher

# Imported once in the kernel so that forked workers do not each import them again on first use
# (building an optimizer pulls in torch._dynamo, close to a second per worker otherwise; the
# worker bootstrap and state are what every launched function starts with).
WARM_IMPORTS = ("torch._dynamo", WORKER_ENTRY.partition(":")[0])


class ForkLauncher(Launcher):
    start_method = "fork"

    def prepare(self) -> None:
        for name in WARM_IMPORTS:
            if name not in sys.modules:
                try:
                    importlib.import_module(name)
                except Exception:  # an optional speed-up, never a reason to fail
                    pass
