"""Fork: workers inherit the function, its arguments and the kernel's imports."""

from __future__ import annotations

from ...utils.openmp import release_thread_pools
from ..processes import warmup
from .base import Launcher


class ForkLauncher(Launcher):
    start_method = "fork"

    def prepare(self) -> None:
        # Imported once here so that forked workers do not each import them on first use.
        warmup.finish()
        # A worker forked from a thread that owns an OpenMP pool would hang at its first
        # parallel region (see utils/openmp.py).
        release_thread_pools()
