"""A node that lacks what the launch needs is named, with what it lacks and how to ship it,
before the function is loaded there (and no rank's unpickling traceback reaches the user).

On this machine every node shares the kernel's files, so what a node lacks is made real the way
it happens on a cluster: a package the kernel imported from a folder the nodes' Python does not
search, and (for notebook_launcher itself) a node environment whose Python finds a
``notebook_launcher`` that cannot be imported.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from helpers.kernelonly import kernel_only_package
from helpers.raycluster import SLOTS, START

from notebook_launcher import ClusterError, RayCluster, notebook_launcher

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _launch(function, cluster: RayCluster):
    return notebook_launcher(function, num_processes=4, cluster=cluster, ui="none").values


def test_a_module_only_the_kernel_has_names_each_node_and_how_to_ship_it(tmp_path, capsys):
    helpers = kernel_only_package(
        tmp_path, "kernel_only_helpers", "def answer(rank):\n    return rank + 41\n"
    )
    answer = helpers.answer

    def uses_it():
        import os

        return answer(int(os.environ["RANK"]))

    with pytest.raises(ClusterError) as caught:
        _launch(uses_it, RayCluster(resources_per_process=SLOTS, timeout=START))
    text = str(caught.value)
    assert "The cluster's nodes cannot run this launch" in text
    assert "node 0 at 127.0.0.1" in text and "node 1 at 127.0.0.1" in text
    assert "(ranks 0, 1)" in text and "(ranks 2, 3)" in text
    assert "module 'kernel_only_helpers'" in text and str(tmp_path) in text
    folder = str(tmp_path / "kernel_only_helpers")
    assert f"runtime_env={{'py_modules': [{folder!r}]}}" in text
    assert "Traceback" not in capsys.readouterr().err  # no rank's unpickling error shown

    shipped = RayCluster(
        resources_per_process=SLOTS, runtime_env={"py_modules": [folder]}, timeout=START
    )
    assert _launch(uses_it, shipped) == [41, 42, 43, 44]  # what the error said to do works


BLOCKER = """
import sys


class _Absent:
    # This Python finds no notebook_launcher, as on a node where it was never installed.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "notebook_launcher":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""


def test_a_node_without_notebook_launcher_is_named(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    without = RayCluster(
        resources_per_process=SLOTS,
        runtime_env={"env_vars": {"PYTHONPATH": str(tmp_path)}},  # the nodes' Python only
        timeout=START,
    )

    def nothing():
        return None

    with pytest.raises(ClusterError) as caught:
        _launch(nothing, without)
    text = str(caught.value)
    assert "node 0 at 127.0.0.1" in text and "node 1 at 127.0.0.1" in text
    assert "notebook_launcher is not installed there" in text
    assert "install notebook_launcher==" in text and "'py_modules': [" in text
