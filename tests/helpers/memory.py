"""What a session's returned values cost the kernel: its resident memory while the caller holds
them, and after the caller dropped them."""

from __future__ import annotations

import gc

import psutil

MB = 1 << 20
BIG = (
    "import torch\n"
    "big = torch.full((50 * 1024 * 1024,), float(__import__('os').environ['RANK']) + 1)"
)  # 200 MB of float32 on every rank


def resident() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def held_then_left(session) -> tuple[float, float]:
    """Pull every rank's 200 MB ``big`` (made first), read all of it, drop it: the MB the
    kernel's memory grew by while the values were held, and after they were dropped."""
    session.exec(BIG)
    before = resident()
    values = session.pull("big")
    assert [float(v[-1]) for v in values] == [r + 1.0 for r in range(len(values))]
    assert all(float(v.sum()) == v.numel() * (r + 1) for r, v in enumerate(values))  # every page
    held = resident() - before
    del values
    left = resident() - before
    return held / MB, left / MB
