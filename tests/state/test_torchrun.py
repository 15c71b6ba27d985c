"""A job started by torchrun on CPUs: PartialState() forms one group of 2, no cpu=True."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch
    import torch.distributed as dist
    from notebook_launcher.state import PartialState

    state = PartialState()  # no cpu=True
    total = torch.tensor([float(state.process_index + 1)])
    dist.all_reduce(total)
    with state.split_between_processes(["a", "b", "c"], apply_padding=True) as share:
        pass
    with state.main_process_first():
        if state.is_main_process:
            time.sleep(0.3)
        entered = time.time()
    state.wait_for_everyone()
    record = {
        "distributed_type": state.distributed_type.value,
        "backend": state.backend,
        "world": dist.get_world_size(),
        "ranks": [state.num_processes, state.process_index, state.local_process_index],
        "sum": total.item(),
        "share": share,
        "entered": entered,
        "repr": repr(state),
    }
    with open(f"{sys.argv[1]}/rank{state.process_index}.json", "w") as out:
        json.dump(record, out)
    state.destroy_process_group()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_job_on_cpu_forms_one_group(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        str(script), str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for rank, record in enumerate(records):
        assert record["distributed_type"] == "MULTI_CPU"
        assert record["backend"] == "gloo"
        assert record["world"] == 2 and record["sum"] == 3.0
        assert record["ranks"] == [2, rank, rank]
        assert record["repr"].startswith("Distributed environment: MULTI_CPU  Backend: gloo")
    assert [r["share"] for r in records] == [["a", "b"], ["c", "c"]]
    assert records[1]["entered"] >= records[0]["entered"]
