"""``split_between``: the share of each process, checked against simple expectations and laws."""

from __future__ import annotations

from collections import OrderedDict, defaultdict

import pytest
import torch

from notebook_launcher.state.split import split_between


def shares(inputs, n, padding=False):
    return [split_between(inputs, n, i, padding) for i in range(n)]


@pytest.mark.parametrize(
    ("n", "padding", "expected"),
    [
        (2, False, [["A", "B"], ["C"]]),
        (2, True, [["A", "B"], ["C", "C"]]),
        (3, False, [["A"], ["B"], ["C"]]),
        (4, False, [["A"], ["B"], ["C"], []]),
        (4, True, [["A"], ["B"], ["C"], ["C"]]),
        (5, True, [["A"], ["B"], ["C"], ["C"], ["C"]]),
    ],
)
def test_lists(n, padding, expected):
    assert shares(["A", "B", "C"], n, padding) == expected


def test_first_processes_take_the_extra_items():
    assert shares(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert shares(list(range(7)), 3, True) == [[0, 1, 2], [3, 4, 6], [5, 6, 6]]


def test_tuples_stay_tuples_and_pad():
    assert shares((1, 2, 3), 2) == [(1, 2), (3,)]
    assert shares((1, 2, 3), 2, True) == [(1, 2), (3, 3)]
    assert shares((1,), 3, True) == [(1,), (1,), (1,)]


@pytest.mark.parametrize("empty", [[], (), torch.empty(0, 3)])
@pytest.mark.parametrize("padding", [False, True])
def test_empty_inputs_give_empty_shares(empty, padding):
    for part in shares(empty, 3, padding):
        assert type(part) is type(empty)
        assert len(part) == 0
    if isinstance(empty, torch.Tensor):
        assert all(p.shape == (0, 3) for p in shares(empty, 3, padding))


def test_tensors_split_along_the_first_dimension_and_pad_with_the_last_row():
    data = torch.arange(10).reshape(5, 2)
    parts = shares(data, 2, padding=True)
    assert parts[0].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert parts[1].tolist() == [[6, 7], [8, 9], [8, 9]]
    assert parts[1].dtype == data.dtype
    unpadded = shares(data, 3)
    assert [p.shape[0] for p in unpadded] == [2, 2, 1]
    assert torch.equal(torch.cat(unpadded), data)


def test_one_dimensional_tensor_shorter_than_the_job():
    parts = shares(torch.tensor([7.0]), 3, padding=True)
    assert [p.tolist() for p in parts] == [[7.0], [7.0], [7.0]]
    assert [p.tolist() for p in shares(torch.tensor([7.0]), 3)] == [[7.0], [], []]


def test_dicts_split_every_value_and_leave_the_input_alone():
    data = {"a": [1, 2, 3], "b": torch.tensor([4, 5, 6]), "c": ("x", "y", "z")}
    parts = shares(data, 2, padding=True)
    assert parts[0]["a"] == [1, 2] and parts[1]["a"] == [3, 3]
    assert parts[1]["b"].tolist() == [6, 6]
    assert parts[1]["c"] == ("z", "z")
    assert data["a"] == [1, 2, 3]  # Accelerate overwrites the caller's dict; we do not


def test_nested_and_special_dicts_keep_their_type():
    nested = OrderedDict(outer={"inner": [1, 2]}, flat=[3, 4])
    parts = shares(nested, 2)
    assert isinstance(parts[0], OrderedDict)
    assert parts[1] == {"outer": {"inner": [2]}, "flat": [4]}
    counts = defaultdict(list, {"k": [1, 2, 3, 4]})
    assert split_between(counts, 2, 1)["k"] == [3, 4]
    assert split_between({}, 2, 0) == {}


def test_dict_values_must_have_one_length():
    with pytest.raises(ValueError, match=r"same length.*'a': 2, 'b': 3"):
        split_between({"a": [1, 2], "b": [1, 2, 3]}, 2, 0)


def test_single_process_gets_the_input_itself():
    data = [1, 2, 3]
    assert split_between(data, 1, 0) is data
    assert split_between(data, 1, 0, apply_padding=True) is data


class Rows:
    """The part of the ``datasets.Dataset`` interface the split uses: ``len`` and ``select``."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def select(self, indices):
        return Rows([self.rows[i] for i in indices])


def test_datasets_are_split_with_select():
    parts = shares(Rows(["a", "b", "c"]), 2, padding=True)
    assert [p.rows for p in parts] == [["a", "b"], ["c", "c"]]
    assert [p.rows for p in shares(Rows([]), 2, padding=True)] == [[], []]


@pytest.mark.parametrize("bad", ["abc", 3, None, {1, 2}, torch.tensor(1.0), {"a": 5}])
def test_unsupported_inputs_are_a_type_error_naming_them(bad):
    with pytest.raises(TypeError, match=r"inputs.*is not valid: expected a list"):
        split_between(bad, 2, 0)


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="apply_padding='yes'"):
        split_between([1], 2, 0, "yes")
    with pytest.raises(ValueError, match="num_processes=0"):
        split_between([1], 0, 0)


def test_split_laws_hold_for_any_length_and_job_size():
    import hypothesis

    st = hypothesis.strategies

    @hypothesis.given(st.lists(st.integers(), max_size=40), st.integers(1, 9))
    @hypothesis.settings(max_examples=300, deadline=None)
    def check(items, n):
        plain = shares(items, n)
        assert [x for part in plain for x in part] == items  # contiguous, in order, complete
        assert max(map(len, plain)) - min(map(len, plain)) <= 1
        padded = shares(items, n, True)
        if items:
            size = -(-len(items) // n)
            assert all(len(p) == size for p in padded)
            for part, pad in zip(plain, padded, strict=True):
                assert pad == part + [items[-1]] * (size - len(part))
        else:
            assert padded == [[]] * n

    check()
