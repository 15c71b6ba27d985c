"""TEST DOUBLE of torch_xla.runtime: ordinals and sizes of the calling replica."""

from __future__ import annotations

import os

from . import _fake


def device_type() -> str | None:
    return os.environ.get("PJRT_DEVICE") or None


def world_size() -> int:
    return _fake.replica().world_size


def global_ordinal() -> int:
    return _fake.replica().ordinal


def local_ordinal() -> int:
    return _fake.replica().local_ordinal


def addressable_device_count() -> int:
    return _fake.replica().here


def local_device_count() -> int:
    return _fake.replica().here


def global_device_count() -> int:
    return _fake.replica().world_size
