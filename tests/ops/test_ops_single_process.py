"""Every operation in one process, unlaunched: no communication, the documented single-process results."""

from __future__ import annotations

import inspect
from collections import OrderedDict, defaultdict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import notebook_launcher
from notebook_launcher import ops
from notebook_launcher.ops.communicator import Communicator, current
from notebook_launcher.state import PartialState


def _nested():
    return {
        "logits": torch.arange(6.0).view(2, 3),
        "labels": [torch.tensor([1, 0]), torch.tensor(True)],
        "extra": OrderedDict(mask=torch.ones(2, dtype=torch.bool)),
        "counts": defaultdict(int, n=torch.tensor([3, 4])),
    }


def test_collectives_return_their_input_untouched_in_one_process():
    data = _nested()
    assert ops.gather(data) is data
    assert ops.broadcast(data, from_process=0) is data
    assert ops.pad_across_processes(data, dim=-1, pad_index=-1, pad_first=True) is data
    zero_d = torch.tensor(2.0)
    assert ops.gather(zero_d) is zero_d  # as Accelerate: no extra dimension in one process
    assert ops.broadcast(zero_d, from_process=5) is zero_d  # any index is this process
    ops.wait_for_everyone()
    state = PartialState()
    assert not state.use_distributed and current().world_size == 1


def test_reduce_in_one_process_copies_and_follows_the_dtype_rules():
    data = _nested()
    for reduction in ("sum", "mean", "none"):
        out = ops.reduce(data, reduction=reduction)
        assert isinstance(out["counts"], defaultdict) and isinstance(out["extra"], OrderedDict)
        assert out["logits"] is not data["logits"] and torch.equal(out["logits"], data["logits"])
        assert out["logits"].data_ptr() != data["logits"].data_ptr()
    mean = ops.reduce(data)
    assert mean["labels"][0].dtype == torch.float32  # the mean of integers is a float
    assert mean["labels"][0].tolist() == [1.0, 0.0]
    summed = ops.reduce(data, "sum")
    assert summed["extra"]["mask"].dtype == torch.int64  # booleans are counted
    assert ops.reduce(data, "none")["extra"]["mask"].dtype == torch.bool  # nothing is summed
    assert ops.reduce(torch.tensor([1, 2]), "sum", scale=2).tolist() == [2, 4]
    assert ops.reduce(torch.tensor([1.0, 2.0]), "none", scale=0.5).tolist() == [0.5, 1.0]
    loss = torch.tensor(3.0, requires_grad=True) * 2
    assert not ops.reduce(loss).requires_grad


def _outcome(call):
    """What a call returns, or the type of the exception it raises."""
    try:
        result = call()
    except Exception as exc:
        return type(exc).__name__
    return result.tolist() if isinstance(result, torch.Tensor) else result


def test_plain_values_in_one_process_behave_as_in_accelerate():
    import accelerate.utils as theirs
    from accelerate import PartialState as TheirState

    values = [3, "text", None, {"a": [1, "b"]}, (2.5, [torch.ones(1)]), [torch.ones(2)]]
    for value in values:
        for name in ("gather", "broadcast"):
            ours = _outcome(lambda name=name, value=value: getattr(ops, name)(value))
            assert ours == _outcome(lambda name=name, value=value: getattr(theirs, name)(value))
            assert ours is value or ours == value
    for data in (["text"], [3], [{"a": "b", "t": torch.ones(1)}], [None], ["a", "b"], [1, 2]):
        ours = _outcome(lambda data=data: ops.concatenate(data))
        assert ours == _outcome(lambda data=data: theirs.concatenate(data)), data
    try:
        for inputs in ("a string", 7, {"a": "xy"}, ["a", "b", "c"], torch.arange(3)):
            with PartialState().split_between_processes(inputs) as ours:
                pass
            with TheirState().split_between_processes(inputs) as expected:
                pass
            assert ours is inputs and expected is inputs
    finally:
        TheirState._reset_state()  # Accelerate's state must not outlive the test


def test_reduce_max_in_one_process_is_a_copy_as_in_accelerate():
    import accelerate.utils as theirs

    for data in (torch.tensor([3, -1]), torch.tensor([True, False]), [torch.ones(2, 2)]):
        ours, expected = ops.reduce(data, "max"), theirs.reduce(data, "max")
        assert ops.listify(ours) == ops.listify(expected)
        assert ops.find_batch_size(ours) == ops.find_batch_size(expected)
        assert ours is not data


def test_object_collectives_in_one_process():
    assert ops.gather_object([1, "a"]) == [1, "a"]
    assert ops.gather_object(("t",)) == ["t"]
    assert ops.gather_object({"k": 1}) == [{"k": 1}]
    items = [{"config": 1}, None]
    assert ops.broadcast_object_list(items) is items and items == [{"config": 1}, None]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 3), max_size=3),
            st.sampled_from([torch.float32, torch.int32, torch.bool, torch.float16]),
        ),
        max_size=5,
    )
)
def test_single_process_reduce_sum_equals_the_input_for_any_structure(specs):
    data = [torch.ones(shape, dtype=dtype) for shape, dtype in specs]
    out = ops.reduce(data, reduction="sum")
    for before, after in zip(data, out, strict=True):
        assert after.shape == before.shape
        assert torch.equal(after, before.to(torch.int64 if before.dtype == torch.bool else None))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: ops.reduce(torch.ones(1), "min"), ValueError, "reduction='min' is not valid"),
        (lambda: ops.reduce(torch.ones(1), "max", scale=None), TypeError, "scale=None"),
        (lambda: ops.reduce({"a": "text"}), TypeError, "tensor contains 'text'"),
        (lambda: ops.reduce(torch.ones(1), scale="2"), TypeError, "scale='2' is not valid"),
        (lambda: ops.reduce([torch.ones(1), None]), TypeError, "tensor contains None"),
        (lambda: ops.broadcast(torch.ones(1), -1), ValueError, "from_process=-1 is not valid"),
        (lambda: ops.broadcast(torch.ones(1), 1.0), TypeError, "from_process=1.0 is not valid"),
        (lambda: ops.broadcast_object_list((1,)), TypeError, "object_list=\\(1,\\) is not valid"),
        (lambda: ops.pad_across_processes(torch.ones(1), dim="0"), TypeError, "dim='0'"),
        (lambda: ops.pad_across_processes(torch.ones(1), pad_index="x"), TypeError, "pad_index="),
        (lambda: ops.pad_across_processes(torch.ones(1), pad_first=1), TypeError, "pad_first=1"),
        (lambda: ops.pad_across_processes({"a": 1}), TypeError, "tensor contains 1"),
    ],
)
def test_bad_arguments_name_the_parameter_and_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_communicator_is_kept_until_the_state_is_created_again():
    first = current()
    assert current() is first and isinstance(first, Communicator)
    assert first.control_device == torch.device("cpu") and not first.debug
    PartialState().debug = True  # the debug switch is read on every call
    assert first.debug
    notebook_launcher.state.reset_state()
    assert current() is not first


def test_top_level_and_utils_export_the_operations():
    import notebook_launcher.utils as utils

    for name in ops.__all__:
        assert getattr(notebook_launcher, name) is getattr(ops, name)
        assert getattr(utils, name) is getattr(ops, name)  # as accelerate.utils has them
    assert sorted(notebook_launcher.__all__) == notebook_launcher.__all__


def test_every_public_function_has_a_documented_signature():
    for name in ops.__all__:
        obj = getattr(ops, name)
        doc = inspect.getdoc(obj) or ""
        assert doc, name
        if inspect.isfunction(obj) and inspect.signature(obj).parameters:
            assert "Args:" in doc or "Example:" in doc, name
