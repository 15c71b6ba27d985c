"""A session on the cluster: the ranks' actors stay alive across calls with their namespaces and
process group; a failing or interrupted call keeps the session, a dead rank breaks it."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import cloudpickle
import pytest
from raycluster import SLOTS

from notebook_launcher import RayCluster, Session, SessionBrokenError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def where() -> tuple[str, int]:
    import ray

    return ray.get_runtime_context().get_node_id(), os.getpid()


def test_a_session_across_nodes_keeps_its_state_until_a_rank_dies():  # noqa: PLR0915
    session = Session(num_processes=4, cluster=RayCluster(resources_per_process=SLOTS), ui="none")
    try:
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

        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))  # the stop button
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                session.exec("import time\ntime.sleep(60)")
        finally:
            timer.join()
        assert session.state == "alive"
        assert session.exec("y").values == [5] * 4

        large = session.exec("torch.full((1 << 20,), float(dist.get_rank()))").values
        assert [float(t[0]) for t in large] == [0.0, 1.0, 2.0, 3.0]
        assert all(t.numel() == 1 << 20 for t in large)

        warm = []
        for _ in range(20):
            started = time.perf_counter()
            session.exec("y")
            warm.append(time.perf_counter() - started)
        print(f"warm session call, 4 ranks on 2 nodes: median {sorted(warm)[10] * 1000:.1f} ms")

        os.kill(places[3][1], signal.SIGKILL)  # a rank's process dies between calls
        deadline = time.monotonic() + 30
        while session.state == "alive" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session.state == "broken"
        with pytest.raises(SessionBrokenError):
            session.exec("y")
    finally:
        session.close()
    assert session.state == "closed"
