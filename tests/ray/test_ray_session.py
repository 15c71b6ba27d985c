"""A session on the cluster: the ranks' actors stay alive across calls with their namespaces and
process group; a failing or interrupted call keeps the session, a dead rank breaks it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest
from helpers.lanes import interrupted_call, killed_rank_breaks, warm_call_median
from helpers.memory import held_then_left
from helpers.processtree import listening
from helpers.raycluster import SLOTS, START, held_groups, live_actors

from notebook_launcher import RayCluster, Session, SessionBrokenError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def where() -> tuple[str, int]:
    import ray

    return ray.get_runtime_context().get_node_id(), os.getpid()


def test_a_session_across_nodes_keeps_its_state_until_a_rank_dies():  # noqa: PLR0915
    before = listening()
    session = Session(
        num_processes=4, cluster=RayCluster(resources_per_process=SLOTS, timeout=START), ui="none"
    )
    try:
        # The kernel listens for its ranks only: rank 0's actor hosts the job's store.
        assert len(listening() - before) == 1
        places = session.run(where).values
        assert len({node for node, _ in places}) == 2
        session.exec(
            "import torch, torch.distributed as dist\n"
            "x = torch.ones(1) * (dist.get_rank() + 1)\n"
            "dist.all_reduce(x)"
        )
        assert [float(v) for v in session.pull("x")] == [10.0] * 4
        session.push(y=5)
        assert session.exec("y * 2").values == [10] * 4

        with pytest.raises(ZeroDivisionError) as caught:
            session.exec("1 / (dist.get_rank() - 2)")
        notes = "\n".join(getattr(caught.value, "__notes__", []))
        assert "rank 2" in notes and "127.0.0.1" in notes
        assert session.state == "alive"
        assert session.exec("float(x)").values == [10.0] * 4  # the namespaces were kept
        session.exec("dist.all_reduce(x)")  # and the process group
        assert session.exec("float(x)").values == [40.0] * 4

        interrupted_call(session)
        assert session.state == "alive"
        assert session.exec("y").values == [5] * 4

        large = session.exec("torch.full((1 << 20,), float(dist.get_rank()))").values
        assert [float(t[0]) for t in large] == [0.0, 1.0, 2.0, 3.0]
        assert all(t.numel() == 1 << 20 for t in large)

        warm = warm_call_median(session, "y", 20)
        print(f"warm session call, 4 ranks on 2 nodes: median {warm * 1000:.1f} ms")

        killed_rank_breaks(session, places[3][1], "y")  # a rank's process dies between calls
    finally:
        session.close()
    assert session.state == "closed"


def test_a_rank_killed_in_a_collective_breaks_the_session_naming_it():
    cluster = RayCluster(resources_per_process=SLOTS, timeout=START)
    with Session(num_processes=4, cluster=cluster, ui="none") as session:
        session.exec("import os, time, torch.distributed as dist\nrank = dist.get_rank()")
        with pytest.raises(SessionBrokenError) as caught:
            session.exec(
                "if rank == 3:\n    time.sleep(0.5)\n    os.kill(os.getpid(), 9)\ndist.barrier()"
            )
        text = str(caught.value)
        assert "rank 3 of the session died" in text, text
        assert session.state == "broken"


KERNEL = """
import sys, time
from notebook_launcher import RayCluster, Session

cluster = RayCluster(
    address=sys.argv[1], resources_per_process={"CPU": 1, "slot": 1}, timeout=300
)
session = Session(num_processes=2, cluster=cluster, ui="none")
print("ready", session.exec("1 + 1").values, flush=True)
time.sleep(600)
"""


def test_a_killed_kernel_takes_its_session_with_it(cluster):
    """Another driver (a kernel, as a notebook's) joins by address, opens a session and is
    SIGKILLed: its actors are owned by it, so the cluster ends them and frees their group."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, cluster.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = kernel.stdout.readline()
        assert line.startswith("ready [2, 2]"), line + kernel.stderr.read()
        assert len(live_actors()) == 2 and len(held_groups()) == 1
    finally:
        kernel.kill()
        kernel.wait(30)
    said = kernel.stderr.read()
    assert f"joined the Ray cluster at {cluster.address}" in said, said
    deadline = time.monotonic() + 30
    while (live_actors() or held_groups()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not live_actors() and not held_groups()


def test_a_ddp_model_across_nodes_survives_failures_inside_its_collectives():
    from launch.session.test_session_collectives import (
        COMMON,
        FRAMEWORKS,
        STEP,
        _same_model_trains_on,
    )

    cluster = RayCluster(resources_per_process=SLOTS, timeout=START)
    with Session(num_processes=4, cluster=cluster, ui="none", stop_grace=5.0) as session:
        session.exec(COMMON + FRAMEWORKS["torch"] + STEP)
        session.exec("step()")
        model_ids = session.exec("id(model)").values
        with pytest.raises(ValueError, match="shape bug on rank 1") as info:
            session.exec("step(fail='raise', where='backward')")  # 3 ranks wait in backward
        assert "still usable" in "\n".join(info.value.__notes__)
        _same_model_trains_on(session, model_ids)
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt, match="still usable"):
                session.exec("step(fail='hang', where='all_reduce')")
        finally:
            timer.cancel()
        _same_model_trains_on(session, model_ids)


def test_pulled_values_are_released_when_dropped():
    cluster = RayCluster(resources_per_process=SLOTS, timeout=START)
    with Session(num_processes=2, cluster=cluster, ui="none") as session:
        held, left = held_then_left(session)
        print(f"Ray session, 2 x 200 MB pulled: {held:.0f} MB held, {left:.0f} MB after del")
        assert held > 300, "the values were not measured (every page read)"
        assert left < 100, f"{left:.0f} MB of dropped values still held by the kernel"
