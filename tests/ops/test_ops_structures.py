"""Properties of the nested-structure helpers over random nested structures (hypothesis)."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from notebook_launcher.ops import (
    concatenate,
    convert_to_fp32,
    find_batch_size,
    honor_type,
    listify,
    recursively_apply,
    send_to_device,
)
from notebook_launcher.utils.tree import leaves, map_structure, refill, to_cpu

Pair = namedtuple("Pair", "first second")
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.float64)
KEYS = st.sampled_from(["a", "b", "labels", "input_ids", "x"])
SETTINGS = settings(max_examples=60, deadline=None)


def _tensor(shape: list[int], dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 5, shape, generator=generator)
    return values.to(dtype)


tensors = st.builds(
    _tensor,
    st.lists(st.integers(0, 3), max_size=3),
    st.sampled_from(DTYPES),
    st.integers(0, 2**16),
)
others = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.none(), st.floats(0, 1))


def _containers(children: Any) -> Any:
    items = st.lists(children, max_size=3)
    mapping = st.dictionaries(KEYS, children, max_size=3)
    return st.one_of(
        items,
        items.map(tuple),
        st.tuples(children, children).map(lambda p: Pair(*p)),
        mapping,
        mapping.map(OrderedDict),
        mapping.map(lambda d: defaultdict(list, d)),
    )


tensor_trees = st.recursive(tensors, _containers, max_leaves=8)
mixed_trees = st.recursive(st.one_of(tensors, others), _containers, max_leaves=8)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def assert_same_layout(a: Any, b: Any, leaf=None) -> None:
    """Same container types, keys, defaultdict factories and lengths all the way down."""
    if isinstance(a, (list, tuple, dict)):
        assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_layout(x, y, leaf)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        if isinstance(a, defaultdict):
            assert a.default_factory is b.default_factory
        for k in a:
            assert_same_layout(a[k], b[k], leaf)
    elif leaf is not None:
        leaf(a, b)


def _equal_leaves(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a is b or a == b


@SETTINGS
@given(mixed_trees)
def test_recursively_apply_maps_tensors_and_keeps_every_container_type(data):
    doubled = recursively_apply(lambda t, k, shift=0: t * k + shift, data, 2, shift=1)

    def check(original, result):
        if isinstance(original, torch.Tensor):
            assert torch.equal(result, original * 2 + 1)
        else:
            assert result is original  # other leaves untouched

    assert_same_layout(data, doubled, check)


@SETTINGS
@given(mixed_trees)
def test_error_on_other_type_raises_exactly_when_a_leaf_is_not_a_tensor(data):
    has_other = any(not _is_tensor(x) for x in leaves(data, lambda x: True))
    if has_other:
        with pytest.raises(TypeError, match="not valid for"):
            recursively_apply(lambda t: t, data, error_on_other_type=True)
    else:
        assert_same_layout(
            data, recursively_apply(lambda t: t, data, error_on_other_type=True), _equal_leaves
        )


@SETTINGS
@given(mixed_trees)
def test_custom_test_type_selects_the_leaves(data):
    result = recursively_apply(lambda x: "seen", data, test_type=lambda x: isinstance(x, str))
    assert_same_layout(data, result, lambda a, b: (b == "seen") if isinstance(a, str) else None)


@SETTINGS
@given(mixed_trees)
def test_leaves_and_refill_round_trip_and_to_cpu_shares_the_walk(data):
    found = leaves(data, _is_tensor)
    assert_same_layout(data, refill(data, found, _is_tensor), _equal_leaves)
    assert_same_layout(data, to_cpu(data), _equal_leaves)
    assert len(found) == len(leaves(to_cpu(data), _is_tensor))


@SETTINGS
@given(st.one_of(st.lists(others), st.lists(others).map(tuple), st.tuples(others, others)))
def test_honor_type_rebuilds_sequences_and_namedtuples(items):
    for container in (items, Pair(*items[:2]) if len(items) >= 2 else items):
        rebuilt = honor_type(container, (x for x in container))
        assert type(rebuilt) is type(container) and list(rebuilt) == list(container)


def test_honor_type_keeps_defaultdict_factory_and_refuses_non_containers():
    rebuilt = honor_type(defaultdict(int, a=1), [("a", 2)])
    assert isinstance(rebuilt, defaultdict) and rebuilt.default_factory is int
    assert rebuilt == {"a": 2}
    with pytest.raises(TypeError, match="obj=3 is not valid"):
        honor_type(3, [])


@SETTINGS
@given(mixed_trees, st.sets(KEYS, max_size=2))
def test_send_to_device_keeps_layout_and_skips_keys_at_every_depth(data, skip):
    moved = send_to_device(data, "cpu", skip_keys=list(skip))
    # Same device: every tensor is the very same object, every container rebuilt alike.
    assert_same_layout(data, moved, lambda a, b: None if not _is_tensor(a) else (a is b) or 1 / 0)
    marked = send_to_device(data, torch.device("cpu"), non_blocking=True, skip_keys=skip)
    assert_same_layout(data, marked, _equal_leaves)


def test_send_to_device_uses_to_on_objects_and_leaves_skipped_values_alone():
    class Batch(dict):
        def to(self, device, non_blocking=False):
            return ("moved", device, non_blocking)

    class OldStyle:
        def to(self, device):  # no non_blocking: retried without it
            return ("old", device)

    t = torch.ones(1, dtype=torch.float16)
    data = {"batch": Batch(x=1), "old": OldStyle(), "keep": t, "deep": [{"keep": "x"}]}
    out = send_to_device(data, "cpu", non_blocking=True, skip_keys="keep")
    assert out["batch"] == ("moved", "cpu", True) and out["old"] == ("old", "cpu")
    assert out["keep"] is t and out["deep"] == [{"keep": "x"}]
    with pytest.raises(TypeError, match="device=1.5 is not valid"):
        send_to_device(t, 1.5)
    with pytest.raises(TypeError, match="skip_keys=3 is not valid"):
        send_to_device(t, "cpu", skip_keys=3)
    with pytest.raises(TypeError, match="non_blocking='yes' is not valid"):
        send_to_device(t, "cpu", non_blocking="yes")


def _batched(data: Any, rows: int, seed: int) -> Any:
    """``data`` with every tensor replaced by one of ``rows`` rows and 2 columns."""
    return map_structure(lambda t: _tensor([rows, 2], t.dtype, seed), data, _is_tensor)


@SETTINGS
@given(tensor_trees, st.lists(st.integers(0, 3), min_size=1, max_size=3), st.integers(0, 99))
def test_concatenate_cats_matching_leaves(data, rows, seed):
    parts = [_batched(data, n, seed + i) for i, n in enumerate(rows)]
    joined = concatenate(parts)
    expected = refill(
        data,
        [torch.cat(group) for group in zip(*(leaves(p, _is_tensor) for p in parts), strict=True)],
        _is_tensor,
    )
    assert_same_layout(expected, joined, _equal_leaves)
    columns = concatenate([_batched(data, rows[0], seed + i) for i in range(len(rows))], dim=1)
    assert all(t.shape == (rows[0], 2 * len(rows)) for t in leaves(columns, _is_tensor))


def test_concatenate_refuses_bad_input():
    with pytest.raises(TypeError, match="data=\\[\\] is not valid"):
        concatenate([])
    with pytest.raises(TypeError, match="data='x' is not valid: can only concatenate tensors"):
        concatenate(["x", "y"])
    assert concatenate(["x"]) == "x"  # a single batch comes back as it is, as in Accelerate
    with pytest.raises(TypeError, match="dim='0' is not valid"):
        concatenate([torch.ones(1)], dim="0")


@SETTINGS
@given(tensor_trees, st.integers(1, 4))
def test_find_batch_size_is_the_first_tensors_first_dimension(data, rows):
    batch = _batched(data, rows, 0)
    first = batch  # follow the first item of every container, as the search does
    while isinstance(first, (list, tuple, dict)) and len(first):
        first = first[next(iter(first))] if isinstance(first, dict) else first[0]
    if isinstance(first, torch.Tensor):
        assert find_batch_size(batch) == rows
    else:
        with pytest.raises(ValueError, match="cannot find a batch size in an empty container"):
            find_batch_size(batch)


def test_find_batch_size_errors_name_the_problem():
    with pytest.raises(ValueError, match="empty container"):
        find_batch_size({"a": []})
    with pytest.raises(TypeError, match="data='x' is not valid: can only find the batch size"):
        find_batch_size(["x", torch.ones(2)])
    with pytest.raises(ValueError, match="0-d tensor"):
        find_batch_size(torch.tensor(1.0))


@SETTINGS
@given(mixed_trees)
def test_listify_turns_tensors_into_lists(data):
    def check(original, result):
        if isinstance(original, torch.Tensor):
            assert result == original.tolist()
        else:
            assert result is original

    assert_same_layout(data, listify(data), check)


@SETTINGS
@given(mixed_trees)
def test_convert_to_fp32_casts_half_precision_only(data):
    def check(original, result):
        if isinstance(original, torch.Tensor) and original.dtype in (torch.float16, torch.bfloat16):
            assert result.dtype == torch.float32 and torch.equal(result, original.float())
        else:
            assert result is original

    assert_same_layout(data, convert_to_fp32(data), check)


def test_recursively_apply_validates_its_arguments():
    with pytest.raises(TypeError, match="func=3 is not valid: expected a callable"):
        recursively_apply(3, [])
    with pytest.raises(TypeError, match="test_type='x' is not valid"):
        recursively_apply(abs, [], test_type="x")
    with pytest.raises(TypeError, match="error_on_other_type=1 is not valid"):
        recursively_apply(abs, [], error_on_other_type=1)
