"""Public enums describing a job."""

from __future__ import annotations

import enum


class DistributedType(str, enum.Enum):
    """How the processes of a job are connected."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    XLA = "XLA"
