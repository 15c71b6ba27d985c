"""The kernel's side of the Slurm node check, on answers as tasks send them: what each node lacks,
grouped by node with its ranks, and how to fix it (the real tasks are in tests/slurm/)."""

from __future__ import annotations

import dataclasses

from notebook_launcher.launch.launchers.slurm.node_check import NodeCheck
from notebook_launcher.protocol.node_environment import describe_node, from_json, to_json


def _answer(**changes) -> bytes:
    return to_json(dataclasses.replace(describe_node(("json",)), **changes))


def test_a_node_like_the_kernel_gets_its_go_and_the_check_ends_when_all_answered():
    check = NodeCheck(("json",), 2)
    assert check.silent() == [0, 1]
    assert check.heard(0, "n1", _answer()) and not check.all_heard()
    assert check.silent() == [1]
    assert check.heard(1, "n2", _answer()) and check.all_heard()
    assert not check.lacking()
    assert from_json(_answer()) == describe_node(("json",))


def test_versions_that_differ_are_named_by_node_with_its_ranks():
    check = NodeCheck(("json",), 3)
    here = describe_node()
    old = dict(here.versions, cloudpickle="0.0.1")
    assert check.heard(0, "n1", _answer())
    assert not check.heard(1, "n2", _answer(versions=old, python="2.7.18"))
    assert not check.heard(2, "n2", _answer(versions=old, python="2.7.18"))
    assert check.lacking()
    text = check.report()
    assert text.startswith("The Slurm nodes cannot run this launch:")
    assert f"node n2 (ranks 1, 2): Python 2.7.18 there, {here.python} here" in text
    assert f"cloudpickle 0.0.1 there, {here.versions['cloudpickle']} here" in text
    assert "node n1" not in text
    assert "install the same versions as this kernel's in the nodes' Python" in text


def test_a_missing_installed_module_says_which_version_to_install():
    check = NodeCheck(("json", "pytest"), 1)
    assert not check.heard(0, "n1", _answer(missing={"pytest": "No module named 'pytest'"}))
    text = check.report()
    assert "node n1 (rank 0): module 'pytest' is not found there" in text
    import pytest

    assert f"install pytest=={pytest.__version__} in the nodes' Python" in text


def test_torch_differing_between_nodes_is_named_once_every_task_answered():
    check = NodeCheck((), 2)
    here = describe_node()
    assert check.heard(0, "n1", _answer())
    assert not check.lacking()  # one node answered: nothing to compare yet
    assert check.heard(1, "n2", _answer(versions=dict(here.versions, torch="1.0")))
    assert check.lacking()
    assert "the nodes have different torch versions: 1.0 on node n2" in check.report()


def test_an_answer_that_cannot_be_read_is_named():
    check = NodeCheck((), 1)
    assert not check.heard(0, "n1", b"{not json")
    assert "node n1 (rank 0): its answer could not be read (not a node's environment" in (
        check.report()
    )
