"""Contract tests of the XLA launch path and backend, run against whichever torch_xla is
importable: the test double in the default lane, the real package in scripts/test_xla.sh."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from notebook_launcher import PreflightError, notebook_launcher
from notebook_launcher.launch.xla_env import detect_xla


def test_detection_reads_the_environment_only(replicas):
    found = detect_xla()
    assert found.usable and found.device_type == "CPU" and found.replicas == replicas
    assert (
        "torch_xla" not in sys.modules
        or not sys.modules["torch_xla"]._XLAC._xla_runtime_is_initialized()
    )


def test_xmp_spawn_refuses_nprocs_other_than_none_or_one():
    import torch_xla.distributed.xla_multiprocessing as xmp

    with pytest.raises(ValueError, match="Unsupported nprocs"):
        xmp.spawn(print, nprocs=2)


def _double() -> bool:
    import torch_xla

    return bool(getattr(torch_xla, "IS_TEST_DOUBLE", False))


def identity():
    import torch_xla.runtime as xr

    from notebook_launcher import PartialState

    state = PartialState()
    print(f"hello from ordinal {xr.global_ordinal()}")
    return (
        state.process_index,
        state.local_process_index,
        state.num_processes,
        state.distributed_type.value,
        xr.global_ordinal(),
        xr.world_size(),
        os.getpid(),
    )


def test_every_replica_returns_its_rank_with_output_labelled(replicas, capfd):
    result = notebook_launcher(identity, ui="none")  # num_processes: every device
    values = result.values
    assert [v[:6] for v in values] == [
        (r, r, replicas, "XLA", r, replicas) for r in range(replicas)
    ]
    assert len({v[6] for v in values}) == 1  # CPU replicas: threads of one process
    out = capfd.readouterr().out
    for rank in range(replicas):
        assert f"[rank{rank}] hello from ordinal {rank}" in out


def collectives(scale):
    import torch

    from notebook_launcher import PartialState
    from notebook_launcher.ops import (
        broadcast,
        gather,
        gather_object,
        pad_across_processes,
        reduce,
        wait_for_everyone,
    )

    state = PartialState()
    rank = state.process_index
    wait_for_everyone()
    ragged = pad_across_processes(torch.arange(rank + 1, dtype=torch.float32))
    return {
        "gather": gather(torch.tensor([float(rank)]) * scale).cpu().tolist(),
        "sum": reduce(torch.tensor([rank + 1.0]), "sum").cpu().tolist(),
        "mean": reduce(torch.tensor([rank + 1.0])).cpu().tolist(),
        "broadcast": broadcast(torch.tensor([rank + 10.0]), from_process=0).cpu().tolist(),
        "padded": ragged.cpu().tolist(),
        "objects": gather_object({"rank": rank}),
    }


def test_collectives_go_through_xla(replicas):
    if replicas > 1 and not _double():
        pytest.xfail(
            "torch_xla 2.9 on PJRT CPU aborts collectives between thread replicas "
            "(rendezvous.cc termination timeout), with a bare xmp.spawn + xm.all_reduce too"
        )
    values = notebook_launcher(collectives, args=(2.0,), num_processes=replicas, ui="none").values
    n = replicas
    for rank, got in enumerate(values):
        assert got["gather"] == [2.0 * r for r in range(n)]
        assert got["sum"] == [n * (n + 1) / 2]
        assert got["mean"] == [(n + 1) / 2]
        assert got["broadcast"] == [10.0]
        assert got["padded"] == [float(i) for i in range(rank + 1)] + [0.0] * (n - rank - 1)
        assert got["objects"] == [{"rank": r} for r in range(n)]


class ReplicaError(Exception):
    pass


def fails_on_last(message):
    from notebook_launcher import PartialState

    state = PartialState()
    if state.is_last_process:
        raise ReplicaError(message)
    return state.process_index


def test_a_raising_replica_raises_its_own_exception_naming_the_rank(replicas):
    with pytest.raises(ReplicaError, match="bad batch") as info:
        notebook_launcher(fails_on_last, args=("bad batch",), ui="none")
    assert any(f"rank {replicas - 1}" in note for note in getattr(info.value, "__notes__", []))


def test_num_processes_other_than_the_device_count_is_refused(replicas):
    with pytest.raises(ValueError, match=f"num_processes={replicas + 1}"):
        notebook_launcher(identity, num_processes=replicas + 1, ui="none")


def test_fp16_is_refused_on_xla():
    with pytest.raises(ValueError, match="mixed_precision='fp16'"):
        notebook_launcher(identity, mixed_precision="fp16", ui="none")


def precision():
    from notebook_launcher import PartialState
    from notebook_launcher.launch.context import current_context

    dtype = PartialState()._backend.autocast_dtype(current_context().mixed_precision)
    return os.environ["ACCELERATE_MIXED_PRECISION"], str(dtype)


def test_bf16_reaches_the_replicas():
    values = notebook_launcher(precision, mixed_precision="bf16", ui="none").values
    assert values[0] == ("bf16", "torch.bfloat16")


def test_a_runtime_started_in_the_kernel_is_caught_before_launching(tmp_path):
    # In a child interpreter: once started, the runtime stays started for the whole process.
    script = textwrap.dedent(
        """
        import torch_xla
        from notebook_launcher import PreflightError, notebook_launcher
        torch_xla.device()
        try:
            notebook_launcher(print, ui="none")
        except PreflightError as exc:
            print("PREFLIGHT", str(exc).splitlines()[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert "PREFLIGHT The XLA runtime has already been started" in done.stdout, done.stderr
    assert PreflightError.__name__ == "PreflightError"
