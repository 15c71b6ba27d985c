"""Debug mode: check that every process makes the same collective call before making it.

A collective whose inputs differ across processes (one rank gathers 4 rows, another 5; one
reduces, another broadcasts) hangs, aborts the process or silently mixes data. With the state's
``debug`` flag (``PartialState(debug=True)`` or ``ACCELERATE_DEBUG_MODE=1``) every tensor
collective first exchanges a description of its call and raises
:class:`DistributedOperationException` on every process, listing each process's call, when they
differ.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

from ..utils.tree import map_structure
from ..utils.validation import short_repr
from .communicator import Communicator


class DistributedOperationException(RuntimeError):
    """Debug mode found processes calling a collective with different inputs.

    The message lists, for each process, the operation and the shapes and dtypes it was given.
    """


class _Shown(str):
    """A string that is its own repr, so descriptions print without quotes."""

    def __repr__(self) -> str:
        return str(self)


def brief(value: Any) -> _Shown:
    """``repr(value)`` on one line and cut short, for error messages."""
    return _Shown(short_repr(value))


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _shape(t: torch.Tensor) -> _Shown:
    return _Shown(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}")


def _ndim(t: torch.Tensor) -> _Shown:
    return _Shown(f"{t.ndim}-d")


def describe(data: Any) -> str:
    """``data`` with each tensor shown as dtype and shape, e.g. ``{'x': float32[4, 10]}``."""
    return repr(map_structure(_shape, data, _is_tensor))


def describe_ndims(data: Any) -> str:
    """``data`` with each tensor shown by its number of dimensions alone."""
    return repr(map_structure(_ndim, data, _is_tensor))


def verify(comm: Communicator, call: str, key: Hashable | None = None, hint: str = "") -> None:
    """Raise on every process unless every process passes the same ``key``.

    Args:
        comm: the job's communicator (the exchange is itself a collective).
        call: this process's call as shown to the user, e.g. ``gather(tensor=float32[4])``.
        key: what must be equal across processes (default: ``call`` itself).
        hint: a sentence on how to fix a mismatch, appended to the message.

    Raises:
        DistributedOperationException: the processes' keys differ.
    """
    seen = comm.all_gather_object((call if key is None else key, call))
    if all(item[0] == seen[0][0] for item in seen):
        return
    lines = "\n".join(f"  - process {rank}: {shown}" for rank, (_, shown) in enumerate(seen))
    same_operation = len({shown.split("(", 1)[0] for _, shown in seen}) == 1
    raise DistributedOperationException(
        "debug mode: the processes made different collective calls, which would hang or mix "
        "data. Every process must make the same call with the same structure, shapes and "
        f"dtypes; the calls were:\n{lines}" + (f"\n{hint}" if hint and same_operation else "")
    )
