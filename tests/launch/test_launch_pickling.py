"""What travels between the caller and the workers: functions, arguments, return values."""

from __future__ import annotations

import os
import threading

import pytest

from notebook_launcher import notebook_launcher as launch


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_lambda_closure_and_local_class(start_method):
    offset = 100  # captured by the closure

    class Scaler:  # defined here, so no module can import it
        def __init__(self, factor):
            self.factor = factor

        def apply(self, x):
            return x * self.factor

    def closure(scaler, to_number):
        rank = int(os.environ["RANK"])
        return {"value": scaler.apply(to_number(rank)) + offset, "scaler": Scaler(rank)}

    result = launch(
        lambda scaler, to_number: closure(scaler, to_number),
        args=(Scaler(3), lambda rank: rank + 1),
        num_processes=2,
        start_method=start_method,
    )

    assert [value["value"] for value in result] == [103, 106]
    returned = [value["scaler"] for value in result]
    assert [type(s).__name__ for s in returned] == ["Scaler", "Scaler"]
    assert [s.factor for s in returned] == [0, 1]


def test_spawn_returns_instances_of_the_callers_local_class():
    class Point:
        def __init__(self, x):
            self.x = x

    result = launch(
        lambda p: Point(p.x + int(os.environ["RANK"])),
        args=(Point(5),),
        num_processes=2,
        start_method="spawn",
    )

    assert all(type(value) is Point for value in result)
    assert [value.x for value in result] == [5, 6]


def test_spawn_unpicklable_argument_names_the_argument_and_path():
    settings = {"optimizer": {"lock": threading.Lock()}, "lr": 0.1}

    with pytest.raises(TypeError) as info:
        launch(lambda a, b: None, args=(1, settings), num_processes=2, start_method="spawn")

    message = str(info.value)
    assert "args[1]['optimizer']['lock']" in message
    assert "lock" in message  # the type that cannot be pickled
    assert "cannot be pickled" in message
    assert "start_method='fork'" in message


def test_spawn_unpicklable_function_is_named():
    lock = threading.Lock()

    def uses_lock():
        with lock:
            return 1

    with pytest.raises(TypeError) as info:
        launch(uses_lock, num_processes=2, start_method="spawn")

    # Named down to the variable it closes over, not just "function".
    assert str(info.value).startswith("closure variable `lock` of ")
    assert "uses_lock (_thread.lock) cannot be pickled" in str(info.value)


def test_unpicklable_argument_is_fine_under_fork():
    lock = threading.Lock()

    def uses_lock(holder):
        with holder["lock"]:
            return int(os.environ["RANK"])

    assert launch(uses_lock, args=({"lock": lock},), num_processes=2).values == [0, 1]


def returns_a_lock_on_rank_1():
    if os.environ["RANK"] == "1":
        return threading.Lock()
    return "fine"


def test_unpicklable_return_value_names_the_rank():
    with pytest.raises(TypeError) as info:
        launch(returns_a_lock_on_rank_1, num_processes=2)

    error = info.value
    assert "rank 1 returned a value that cannot be pickled" in str(error)
    assert "lock" in str(error)
    assert error.launch_failure.rank == 1
    assert "rank 1 (local rank 1" in "\n".join(error.__notes__)


CELL = """
import threading
lock = threading.Lock()

def train():
    with lock:
        return 1

def outer():
    handle = open(__file__) if False else threading.Lock()

    def step():
        with handle:
            return 2

    return step
"""


def _cell_functions():
    """Functions as a notebook cell defines them: in a module nothing can import, so cloudpickle
    ships them by value, with the globals and closures they use."""
    namespace = {"__name__": "notebook_cell_that_cannot_be_imported"}
    exec(compile(CELL, "<ipython-input-1>", "exec"), namespace)
    return namespace["train"], namespace["outer"]()


def test_spawn_names_the_global_a_function_uses_that_cannot_be_pickled():
    train, _ = _cell_functions()
    with pytest.raises(TypeError) as info:
        launch(train, num_processes=2, start_method="spawn")
    message = str(info.value)
    assert message.startswith("global `lock` used by train (_thread.lock) cannot be pickled")


def test_spawn_names_the_closure_variable_that_cannot_be_pickled():
    _, step = _cell_functions()
    with pytest.raises(TypeError) as info:
        launch(step, num_processes=2, start_method="spawn")
    assert str(info.value).startswith("closure variable `handle` of outer.<locals>.step")
