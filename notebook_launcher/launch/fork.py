"""Fork: workers inherit the function, its arguments and the kernel's imports."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .base import Launcher

# Imported once in the kernel so that forked workers do not each import them again on first use
# (building an optimizer pulls in torch._dynamo, close to a second per worker otherwise; the
# worker bootstrap and state are what every launched function starts with).
WARM_IMPORTS = ("torch._dynamo", "notebook_launcher.worker.bootstrap")


class ForkLauncher(Launcher):
    start_method = "fork"

    def payload(self, function: Any, args: tuple) -> Any:
        return (function, args)  # inherited through fork, never pickled

    def prepare(self) -> None:
        for name in WARM_IMPORTS:
            if name not in sys.modules:
                try:
                    importlib.import_module(name)
                except Exception:  # an optional speed-up, never a reason to fail
                    pass
