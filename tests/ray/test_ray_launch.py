"""Launches on a real local multi-node Ray cluster: every guarantee of a local launch, across nodes.

The functions the ranks run are shipped by value (as a notebook's are): this module is not
importable on the nodes.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest
import torch
from helpers import lanes
from helpers.lanes import train_ddp_steps
from helpers.processtree import listening
from helpers.ranklabels import printed_by
from helpers.raycluster import SLOTS, START, listening_addresses, rank_niceness

from notebook_launcher import (
    ClusterError,
    PartialState,
    RayCluster,
    WorkersFailedError,
    WorkerStalledError,
    launch_in_background,
    notebook_launcher,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(lanes)
ON_TWO_NODES = RayCluster(resources_per_process=SLOTS, timeout=START)


def on_cluster(function, *args, num_processes: int = 2, **options):
    """``notebook_launcher`` on the two nodes, without a view."""
    options.setdefault("cluster", ON_TWO_NODES)
    return notebook_launcher(function, args=args, num_processes=num_processes, ui="none", **options)


def train_ddp(steps: int):
    import ray

    _, model = train_ddp_steps(steps)
    os.write(1, b"written below Python\n")
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "weight": model.weight.detach().clone(),
        "env": {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")},
        "niceness": os.nice(0),
    }


def test_a_ddp_job_spans_the_nodes_and_returns_every_rank(capsys):
    result = on_cluster(train_ddp, 5, num_processes=4)
    values = result.values
    assert len(values) == 4
    nodes = [v["node"] for v in values]
    assert len(set(nodes)) == 2 and nodes[0] == nodes[1] and nodes[2] == nodes[3]
    assert [v["env"]["LOCAL_RANK"] for v in values] == ["0", "1", "0", "1"]
    assert [v["env"]["GROUP_RANK"] for v in values] == ["0", "0", "1", "1"]
    assert {v["env"]["WORLD_SIZE"] for v in values} == {"4"}
    for value in values[1:]:  # one job: DDP kept every replica equal
        assert torch.equal(value["weight"], values[0]["weight"])
    # At this process's priority, as a local launch's ranks, not at Ray workers' niceness 15.
    assert [v["niceness"] for v in values] == [rank_niceness()] * 4
    out = capsys.readouterr().out
    lines = out.splitlines()
    for rank in range(4):
        assert f"[rank{rank}] rank {rank} trained" in out
        assert printed_by(lines, rank, "written below Python"), out  # alike lines shown once
    model = result.panel.model
    assert model.metrics["loss"].last_mean() is not None
    assert all(state.node for state in model.ranks)
    assert len({state.node for state in model.ranks}) == 2


def niceness_and_variable() -> tuple[int, str]:
    return os.nice(0), os.environ["TRAINING_FLAG"]


def test_a_niceness_set_for_the_ranks_is_kept_and_their_variables_reach_them():
    cluster = RayCluster(
        resources_per_process=SLOTS,
        runtime_env={"env_vars": {"RAY_worker_niceness": "15", "TRAINING_FLAG": "on"}},
        timeout=START,
    )
    values = on_cluster(niceness_and_variable, cluster=cluster).values
    assert values == [(min(19, os.nice(0) + 15), "on")] * 2


def raise_on_rank_one(folder: str):
    if os.environ["RANK"] == "1":
        Path(folder, "raised").write_text(repr(time.time()))
        raise KeyError("no such key on rank 1")
    time.sleep(120)


def test_a_raising_rank_raises_its_own_exception_naming_rank_and_node(tmp_path):
    with pytest.raises(KeyError) as caught:
        on_cluster(raise_on_rank_one, str(tmp_path), num_processes=4)
    after = time.time() - float((tmp_path / "raised").read_text())
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "rank 1" in notes and "127.0.0.1" in notes and "Ray node" in notes
    assert "Stopped because of this failure: rank 0, 2, 3" in notes
    print(f"raise to exception: {after:.3f} s")


def killed_in_a_collective():
    state = PartialState()
    total = torch.ones(1)
    torch.distributed.all_reduce(total)
    if state.process_index == 3:
        time.sleep(0.5)  # the others wait in the next all_reduce
        os.kill(os.getpid(), signal.SIGKILL)
    torch.distributed.all_reduce(total)


def test_a_rank_killed_in_a_collective_is_the_one_named():
    """The peers' "connection closed" comes over their sockets before Ray reports the killed
    rank's end: the error must still name the dead rank, not a peer that lost it."""
    for _ in range(2):  # the order in which the kernel learns both varies from run to run
        with pytest.raises(WorkersFailedError) as caught:
            on_cluster(killed_in_a_collective, num_processes=4)
        text = str(caught.value)
        assert text.startswith("rank 3 ") and "died" in text, text
        assert "Stopped because of this failure: rank 0, 1, 2" in text


def fail_first_attempt():
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
        raise RuntimeError("first attempt")
    return int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def test_a_restart_starts_every_rank_again_on_the_cluster(capsys):
    result = on_cluster(fail_first_attempt, max_restarts=1)
    assert result.values == [1, 1] and result.restarts == 1
    assert "restarting all 2 processes (restart 1 of 1)" in capsys.readouterr().err


def sleep_on(folder: str):
    Path(folder, f"ready{os.environ['RANK']}").touch()
    try:
        time.sleep(120)
    finally:
        Path(folder, f"finally{os.environ['RANK']}").touch()


def test_a_stall_stops_every_rank_with_their_stacks(tmp_path):
    with pytest.raises(WorkerStalledError) as caught:
        on_cluster(sleep_on, str(tmp_path), stall_timeout=3)
    stacks = caught.value.stacks
    assert sorted(stacks) == [0, 1]
    for stack in stacks.values():
        assert "sleep_on" in stack
    assert "rank 0 was in sleep_on" in str(caught.value)
    assert (tmp_path / "finally0").exists() and (tmp_path / "finally1").exists()


def test_an_interrupt_stops_every_rank_gracefully(tmp_path):
    def interrupt_when_ready():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all((tmp_path / f"ready{rank}").exists() for rank in (0, 1)):
                time.sleep(0.2)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.02)

    interrupter = threading.Thread(target=interrupt_when_ready)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            on_cluster(sleep_on, str(tmp_path))
    finally:
        interrupter.join()
    assert "every worker has been stopped" in str(caught.value)
    assert (tmp_path / "finally0").exists() and (tmp_path / "finally1").exists()


def large(megabytes: int):
    rank = int(os.environ["RANK"])
    return torch.full((megabytes << 18,), float(rank)), rank  # float32: 4 bytes each


def test_large_results_come_back_from_every_rank():
    values = on_cluster(large, 4, num_processes=4).values
    for rank, (tensor, small) in enumerate(values):
        assert small == rank
        assert tensor.numel() * 4 == 4 << 20
        assert torch.equal(tensor, torch.full_like(tensor, float(rank)))


def wait_for_file(folder: str):
    Path(folder, f"ready{os.environ['RANK']}").touch()
    while not Path(folder, "go").exists():
        time.sleep(0.02)
    return int(os.environ["RANK"])


def test_a_connection_without_the_secret_gets_nothing(tmp_path):
    before = listening()
    handle = launch_in_background(
        wait_for_file, args=(str(tmp_path),), num_processes=2, cluster=ON_TWO_NODES, ui="none"
    )
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline and not handle.done
            time.sleep(0.05)
        listeners = listening() - before
        assert listeners and {ip for ip, _ in listeners} == {"127.0.0.1"}
        assert listening_addresses() <= {"127.0.0.1"}  # the nodes, the ranks, the kernel
        for address in listeners:
            with socket.create_connection(address, timeout=10) as intruder:
                intruder.sendall(os.urandom(72))  # a hello of the right size, without the secret
                assert intruder.recv(1024) == b""  # closed, having sent nothing
    finally:
        (tmp_path / "go").touch()
    assert handle.wait(120).values == [0, 1]


def test_bad_input_is_refused_before_anything_starts():
    def nothing():
        return None

    with pytest.raises(ValueError, match="cluster='k8s'"):
        notebook_launcher(nothing, num_processes=2, cluster="k8s")
    with pytest.raises(TypeError, match="resources_per_process.*must be a number"):
        RayCluster(resources_per_process={"CPU": "1"})
    with pytest.raises(ValueError, match="start_method='spawn'.*cluster"):
        notebook_launcher(nothing, num_processes=2, cluster="ray", start_method="spawn")
    with pytest.raises(ValueError, match="num_nodes=2.*cluster"):
        notebook_launcher(nothing, num_processes=2, cluster="ray", num_nodes=2)
    with pytest.raises(ValueError, match="TPU"):
        RayCluster(resources_per_process={"TPU": 1})
    with pytest.raises(ValueError, match="node_timeout=1.*from 3 to"):
        RayCluster(node_timeout=1)
    with pytest.raises(ValueError, match="node_timeout='30'"):
        RayCluster(node_timeout="30")
    with pytest.raises(ValueError, match="placement='everywhere'"):
        RayCluster(placement="everywhere")
    with pytest.raises(ValueError, match="num_processes=None"):
        notebook_launcher(nothing, cluster="ray")


def test_a_cluster_too_small_says_what_was_asked_and_what_it_has():
    small = RayCluster(resources_per_process=SLOTS, timeout=1)
    with pytest.raises(ClusterError) as caught:
        on_cluster(lambda: None, num_processes=5, cluster=small)
    text = str(caught.value)
    assert "5 × {CPU: 1, slot: 1} requested" in text
    assert "4 slot on 2 nodes" in text and "4 CPU on 2 nodes" in text


def test_without_ray_the_cluster_asks_for_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"notebook_launcher\[ray\]"):
        on_cluster(lambda: None, cluster="ray")


def test_every_runtime_env_key_ray_takes_is_accepted():
    from ray.runtime_env import RuntimeEnv

    from notebook_launcher.launch.launchers.ray.settings import RUNTIME_ENV_KEYS

    public = {key for key in RuntimeEnv.known_fields if not key.startswith("_")}
    assert public <= set(RUNTIME_ENV_KEYS), public - set(RUNTIME_ENV_KEYS)
