"""What a node needs to run a rank: the modules a pickled function imports when loaded, and the
report that names each node lacking something (the Ray lane checks it on real nodes)."""

from __future__ import annotations

import collections
import importlib
import pickle
import sys
import types

import cloudpickle
import numpy as np
import torch

from notebook_launcher.launch.launchers.ray.node_check import NodeProblem, compare, report
from notebook_launcher.protocol.node_environment import (
    NodeEnvironment,
    describe_node,
    modules_imported,
)


def _own_module(tmp_path, name: str) -> types.ModuleType:
    (tmp_path / f"{name}.py").write_text("def answer():\n    return 42\n")
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_the_modules_a_pickled_function_imports_are_found(tmp_path):
    own = _own_module(tmp_path, "own_helpers_for_pickles")
    answer = own.answer

    def by_value(x):  # modules as globals, a function of a module, arguments of a library's
        return np.zeros(1), torch.distributed, own, answer(), x

    payload = cloudpickle.dumps((by_value, (torch.ones(2), collections.OrderedDict())))
    found = modules_imported(payload)
    assert {"numpy", "torch", "own_helpers_for_pickles", "collections"} <= set(found)
    assert "builtins" not in found and "__main__" not in found
    # plain pickles, old protocols too: globals by reference
    for protocol in (0, 2, 5):
        assert "own_helpers_for_pickles" in modules_imported(pickle.dumps(answer, protocol))


def test_a_node_lacking_a_module_and_a_version_is_named_with_how_to_fix_it(tmp_path):
    own = _own_module(tmp_path, "own_helpers_for_reports")
    here = describe_node()
    there = NodeEnvironment(
        python=here.python,
        versions={**here.versions, "notebook_launcher": "0.0.1"},
        missing={"own_helpers_for_reports": "No module named 'own_helpers_for_reports'"},
    )
    lacks = compare(here, there)
    assert any("module 'own_helpers_for_reports' is not found there" in x for x in lacks)
    assert any("notebook_launcher 0.0.1 there" in x for x in lacks)
    assert compare(here, describe_node(("own_helpers_for_reports",))) == ()
    text = report(
        [NodeProblem("node 1 at 10.0.0.5, Ray node 4d465432", (2, 3), lacks)],
        None,
        ("numpy", "own_helpers_for_reports"),
    )
    assert "node 1 at 10.0.0.5, Ray node 4d465432 (ranks 2, 3)" in text
    assert f"'py_modules': [{own.__file__!r}]" in text
    assert "install notebook_launcher==" in text


def test_a_missing_installed_package_is_offered_to_pip():
    here = describe_node()
    there = NodeEnvironment(here.python, dict(here.versions), {"numpy": "No module named 'numpy'"})
    text = report([NodeProblem("node 1", (1,), compare(here, there))], None, ("numpy",))
    assert f"'pip': ['numpy=={np.__version__}']" in text and "(rank 1)" in text
