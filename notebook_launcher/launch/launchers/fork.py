"""Fork: workers inherit the function, its arguments and the kernel's imports."""

from __future__ import annotations

from .. import warmup
from .base import Launcher


class ForkLauncher(Launcher):
    start_method = "fork"

    def prepare(self) -> None:
        # Imported once here so that forked workers do not each import them on first use.
        warmup.finish()
