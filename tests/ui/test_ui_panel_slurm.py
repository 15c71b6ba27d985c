"""The config panel's Slurm choice: its form (partition, nodes, tasks per node, time limit), the
record it makes over the SlurmCluster the panel was given, and what it refuses by name. Nothing is
queued here: a real launch from the panel is in tests/slurm/."""

from __future__ import annotations

import html

import pytest

from notebook_launcher import LaunchPanel, RayCluster, SlurmCluster


def train(steps):
    return steps


def test_the_panel_offers_slurm_and_launches_with_its_record(comms):
    panel = LaunchPanel(train, args=(1,), num_processes=2, max_processes=2, start_method="spawn")
    assert panel.where.options == ("this machine", "Ray cluster", "Slurm")
    form = panel.view.where_form
    assert form.slurm_fields.layout.display == "none"  # hidden until Slurm is chosen
    panel.where.value = "Slurm"
    assert form.slurm_fields.layout.display is None and form.fields.layout.display == "none"
    assert panel.start_method.disabled  # each rank is a Slurm task
    panel.num_processes.value = 4  # more than this machine: the job has the room
    panel.partition.value = "debug"
    panel.nodes.value = 2
    panel.time_limit.value = "0:10:00"
    settings = panel.settings()
    assert settings.cluster == SlurmCluster(partition="debug", nodes=2, time="0:10:00")
    assert settings.num_processes == 4 and settings.start_method == "fork"  # "not used"
    where = "Slurm (partition debug), 4 ranks: 2 nodes × 2 tasks, 1 CPU each"
    assert f"<td>{where}</td>" in panel.plan.value and "4 (slurm)" in panel.plan.value
    assert "a free port on this kernel&#x27;s address" in panel.plan.value
    shown = panel.static_html()
    assert f"<td>{where}</td>" in shown and "start method" not in shown
    panel.tasks_per_node.value = 2
    panel.partition.value = ""
    assert panel.settings().cluster == SlurmCluster(nodes=2, tasks_per_node=2, time="0:10:00")
    # Back on this machine: the 4 ranks are kept as typed and refused beside the field (the
    # machine's bound is 2 here), not turned into 2; Launch waits for a valid number.
    panel.where.value = "this machine"
    assert not panel.start_method.disabled and panel.num_processes.value == 4
    assert "num_processes=4 is not valid" in panel.view.processes_note.value
    assert panel.launch_button.disabled
    panel.num_processes.value = 2
    settings = panel.settings()
    assert settings.cluster is None and settings.start_method == "spawn"
    assert settings.num_processes == 2 and not panel.launch_button.disabled


def test_a_panel_given_a_slurm_cluster_starts_on_it_and_keeps_its_other_options(comms):
    given = SlurmCluster(
        partition="gpu", tasks_per_node=2, setup="module load cuda", timeout=30, cpus_per_task=2
    )
    panel = LaunchPanel(train, args=(1,), num_processes=4, max_processes=2, cluster=given)
    assert panel.where.value == "Slurm" and panel.num_processes.value == 4
    assert panel.partition.value == "gpu" and panel.tasks_per_node.value == 2
    assert panel.nodes.value == 0 and panel.time_limit.value == ""
    assert panel.settings().cluster == given
    panel.time_limit.value = "1:00:00"
    cluster = panel.settings().cluster
    assert cluster.time == "1:00:00" and cluster.setup == "module load cuda"
    assert cluster.timeout == 30 and cluster.cpus_per_task == 2
    assert "2 nodes × 2 tasks, 2 CPU each" in panel.plan.value
    panel.where.value = "Ray cluster"  # the Slurm options are not a Ray cluster's
    assert panel.settings().cluster == RayCluster()


def test_the_panel_takes_slurm_by_name(comms):
    panel = LaunchPanel(train, args=(1,), num_processes=2, cluster="slurm")
    assert panel.where.value == "Slurm" and panel.settings().cluster == SlurmCluster()
    assert "Slurm (partition (default)), 2 ranks: 1 node × 2 tasks" in panel.plan.value


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("partition", "my queue", "partition='my queue' is not valid"),
        ("time_limit", "soon", "time='soon' is not valid"),
        ("nodes", 3, "num_processes=2 is not valid: expected nodes x tasks_per_node ranks"),
        ("tasks_per_node", 4, "num_processes=2 is not valid: expected nodes x tasks_per_node"),
    ],
)
def test_refused_slurm_fields_are_named_and_nothing_is_queued(comms, field, value, match):
    panel = LaunchPanel(train, args=(1,), num_processes=2, max_processes=2)
    panel.where.value = "Slurm"
    getattr(panel, field).value = value
    shown = html.escape(match)
    assert shown in panel.plan.value
    assert panel.launch() is None and panel.handle is None
    assert shown in panel.message.value and not panel.launch_button.disabled
