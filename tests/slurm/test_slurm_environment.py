"""A Slurm node that lacks what the launch needs is named, with what it lacks and how to provide
it, before the function is loaded there (no rank's unpickling traceback reaches the user).

Every node here shares the kernel's files and Python, so what a node lacks is made real as on a
cluster: a package the kernel imported from a folder the ranks' Python does not search (it is on
the kernel's ``sys.path`` only, not in the environment the tasks inherit).
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from helpers.kernelonly import kernel_only_package

from notebook_launcher import ClusterError, SlurmCluster, notebook_launcher

cloudpickle.register_pickle_by_value(sys.modules[__name__])
TWO_NODES = SlurmCluster(nodes=2, kernel_address="127.0.0.1", timeout=120)


def test_a_module_only_the_kernel_has_names_each_node_and_how_to_provide_it(slurm, tmp_path, capfd):
    helpers = kernel_only_package(
        tmp_path, "kernel_only_slurm", "def answer(rank):\n    return rank + 41\n"
    )
    answer = helpers.answer

    def uses_it():
        import os

        return answer(int(os.environ["RANK"]))

    def launch(cluster):
        return notebook_launcher(uses_it, num_processes=4, cluster=cluster, ui="none").values

    with pytest.raises(ClusterError) as caught:
        launch(TWO_NODES)
    text = str(caught.value)
    assert text.startswith("The Slurm nodes cannot run this launch:")
    assert "node n1 (ranks 0, 1)" in text and "node n2 (ranks 2, 3)" in text
    assert "module 'kernel_only_slurm' is not found there" in text and str(tmp_path) in text
    fix = f"SlurmCluster(setup='export PYTHONPATH={tmp_path}:$PYTHONPATH')"
    assert fix in text
    assert "Traceback" not in capfd.readouterr().err  # no rank's unpickling error shown
    slurm.wait_no_jobs(15.0)

    provided = SlurmCluster(
        nodes=2,
        kernel_address="127.0.0.1",
        timeout=120,
        setup=f"export PYTHONPATH={tmp_path}:$PYTHONPATH",
    )
    assert launch(provided) == [41, 42, 43, 44]  # what the error said to do works
