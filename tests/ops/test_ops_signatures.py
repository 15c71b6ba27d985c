"""The operations take the same parameters, in the same order, with the same defaults as Accelerate."""

from __future__ import annotations

import inspect

import accelerate.utils as their_utils
import pytest

from notebook_launcher import ops

SHARED = [name for name in ops.__all__ if name != "DistributedOperationException"]


def _shape(function):
    def default(value):  # a default function (test_type) is each library's own: compare names
        return value.__name__ if callable(value) else value

    return [
        (p.name, p.kind, default(p.default))
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize("name", SHARED)
def test_same_parameters_order_and_defaults(name):
    assert _shape(getattr(ops, name)) == _shape(getattr(their_utils, name))


def test_the_debug_exception_has_accelerates_name():
    from accelerate.utils.operations import DistributedOperationException

    assert ops.DistributedOperationException.__name__ == DistributedOperationException.__name__
