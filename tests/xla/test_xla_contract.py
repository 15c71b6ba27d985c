"""Contract tests of the XLA launch path and backend, run against whichever torch_xla is
importable: the test double in the default lane, the real package in scripts/test_xla.sh."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from notebook_launcher import PreflightError, notebook_launcher
from notebook_launcher.backends.xla import detect_xla


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


def writes_at_every_level():
    import threading

    from notebook_launcher import PartialState

    rank = PartialState().process_index
    child = threading.Thread(target=print, args=(f"child thread of replica {rank}",))
    child.start()
    child.join(30)
    os.write(1, f"fd 1 of replica {rank}\n".encode())
    os.write(2, f"fd 2 of replica {rank}\n".encode())
    print(f"print of replica {rank}", file=sys.stderr, flush=True)


def test_output_is_labelled_by_replica_where_it_can_be_and_by_process_where_not(replicas, capfd):
    notebook_launcher(writes_at_every_level, ui="none")
    captured = capfd.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    process = "(process) " if replicas > 1 else ""  # replicas are threads of one process
    # fd-level output carries the label of the replica that set the process up: whichever of
    # the threads got there first, the same for every line.
    labels = set()
    for rank in range(replicas):
        assert f"[rank{rank}] child thread of replica {rank}" in out
        assert f"[rank{rank}] print of replica {rank}" in err
        for fd, lines in ((1, out), (2, err)):
            found = [line for line in lines if line.endswith(f"{process}fd {fd} of replica {rank}")]
            assert len(found) == 1, (fd, rank, lines)
            labels.add(found[0].split("]")[0] + "]")
    assert len(labels) == 1 and labels <= {f"[rank{r}]" for r in range(replicas)}, labels


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
        pytest.xfail(THREAD_REPLICA_COLLECTIVES)
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
    from notebook_launcher.protocol.context import current_context

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


# -- data loading ----------------------------------------------------------------------------------

THREAD_REPLICA_COLLECTIVES = (
    "torch_xla 2.9 on PJRT CPU aborts collectives between thread replicas "
    "(rendezvous.cc termination timeout), with a bare xmp.spawn + xm.all_reduce too"
)
Pair = collections.namedtuple("Pair", "x index")


def _numbers(samples, fail_at=None):
    """A dataset of ``samples`` Pairs that records the threads reading it (and may fail)."""
    import threading

    import torch
    from torch.utils.data import Dataset

    class Numbers(Dataset):
        readers: list = []

        def __len__(self):
            return samples

        def __getitem__(self, index):
            if index == fail_at:
                raise LookupError(f"sample {index} is corrupt")
            self.readers.append(threading.get_ident())
            return Pair(torch.tensor([float(index)]), index)

    return Numbers()


def prepared_batches(samples, batch_size):
    import threading

    import torch_xla.distributed.parallel_loader as pl
    from torch.utils.data import DataLoader

    from notebook_launcher import GradientState, PartialState
    from notebook_launcher.data import prepare_data_loader, skip_first_batches
    from notebook_launcher.data.xla_loader import routes_through_mp_device_loader

    state = PartialState()
    dataset = _numbers(samples)
    loader = prepare_data_loader(
        DataLoader(dataset, batch_size=batch_size), put_on_device=True, rng_types=["generator"]
    )
    for _ in loader:  # an epoch left early: its threads stop, the loader is no longer active
        break
    active_after_break = GradientState().in_dataloader
    dataset.readers.clear()
    batches, flags = [], []
    for batch in loader:
        batches.append(batch)
        flags.append(loader.end_of_dataloader)
    skipped = list(skip_first_batches(loader, 1))
    return {
        "state_device": str(state.device),
        "devices": sorted({str(b.x.device) for b in batches + skipped}),
        "types": sorted({type(b).__name__ for b in batches}),
        "indices": [b.index.cpu().tolist() for b in batches],
        "skipped": [b.index.cpu().tolist() for b in skipped],
        "len": len(loader),
        "total_batch_size": loader.total_batch_size,
        "total_dataset_length": loader.total_dataset_length,
        "end_flags": flags,
        "active_after_break": active_after_break,
        "read_in_background": sum(r != threading.get_ident() for r in dataset.readers),
        "routed": routes_through_mp_device_loader(loader),
        "skipped_routed": routes_through_mp_device_loader(skip_first_batches(loader, 1)),
        "mp_device_loader": pl.MpDeviceLoader.__module__,
    }


def test_a_prepared_loader_reads_through_mp_device_loader_onto_the_device(replicas):
    samples, size = 10, 2
    values = notebook_launcher(prepared_batches, args=(samples, size), ui="none").values
    steps = -(-samples // (size * replicas))  # even_batches: every replica gets as many
    order = list(range(samples)) * 2
    for rank, got in enumerate(values):
        assert got["routed"] and got["mp_device_loader"] == "torch_xla.distributed.parallel_loader"
        assert got["skipped_routed"]
        assert got["devices"] == [got["state_device"]]
        if not _double():
            assert got["state_device"].startswith("xla")
        assert got["types"] == ["Pair"]  # torch_xla alone would give lists
        starts = [(step * replicas + rank) * size for step in range(steps)]
        assert got["indices"] == [order[s : s + size] for s in starts]
        assert got["skipped"] == got["indices"][1:]
        assert got["len"] == steps
        assert got["total_batch_size"] == size * replicas
        assert got["total_dataset_length"] == samples
        assert got["end_flags"] == [False] * (steps - 1) + [True]
        assert not got["active_after_break"]
        assert got["read_in_background"] >= (steps - 1) * size  # all but the first batch


def metrics(samples, batch_size, device_placement=True, workers=0):
    import torch
    from torch.utils.data import DataLoader

    from notebook_launcher import Accelerator

    accelerator = Accelerator(device_placement=device_placement)
    # Shuffled: the replicas' shuffles agree only if the generators are synchronised.
    data = DataLoader(
        torch.arange(samples), batch_size=batch_size, shuffle=True, num_workers=workers
    )
    loader = accelerator.prepare(data)
    seen = []
    for batch in loader:
        if device_placement:
            assert batch.device == accelerator.device
        else:  # batches stay on the host: the collective moves them
            batch = batch.to(accelerator.device)
        seen += accelerator.gather_for_metrics(batch).cpu().tolist()
    return seen


@pytest.mark.parametrize(
    ("placement", "workers"),
    [(True, 0), (False, 0), (True, 2)],
    ids=["on-device", "host-batches", "loader-workers"],
)
def test_gather_for_metrics_drops_the_duplicated_tail_on_xla(replicas, placement, workers):
    if replicas > 1 and not _double():
        pytest.xfail(THREAD_REPLICA_COLLECTIVES)
    values = notebook_launcher(
        metrics, args=(23, 2, placement, workers), ui="none", timeout=120
    ).values
    assert all(sorted(seen) == list(range(23)) for seen in values)


def reads_a_corrupt_sample():
    from torch.utils.data import DataLoader

    from notebook_launcher.data import prepare_data_loader

    loader = prepare_data_loader(
        DataLoader(_numbers(12, fail_at=9), batch_size=2), put_on_device=True
    )
    return [batch.index.tolist() for batch in loader]


def test_an_error_reading_a_batch_in_the_background_is_raised_in_the_replica(replicas):
    with pytest.raises(LookupError, match="sample 9 is corrupt"):
        notebook_launcher(reads_a_corrupt_sample, ui="none")


def dispatches():
    from torch.utils.data import DataLoader

    from notebook_launcher.data import prepare_data_loader

    try:
        prepare_data_loader(DataLoader(_numbers(4)), put_on_device=True, dispatch_batches=True)
    except ValueError as exc:
        return str(exc)
    return None


def test_dispatch_batches_is_refused_on_xla():
    message = notebook_launcher(dispatches, ui="none").values[0]
    assert message.startswith("dispatch_batches=True is not valid: on XLA devices")


def raw_mp_device_loader():
    import torch
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    loader = pl.MpDeviceLoader([(torch.ones(2), 1), Pair(torch.zeros(1), 2)], torch_xla.device())
    items = list(loader)
    return len(loader), [type(item).__name__ for item in items], str(items[0][0].device)


def test_mp_device_loader_turns_tuples_into_lists_on_the_device():
    length, kinds, device = notebook_launcher(raw_mp_device_loader, ui="none").values[0]
    assert (length, kinds) == (2, ["list", "list"])
    assert device.startswith("xla") or _double()


# -- pickling --------------------------------------------------------------------------------------


def test_an_unpicklable_argument_is_explained_for_xla():
    with pytest.raises(TypeError) as info:
        notebook_launcher(identity_of, args=({"lock": threading.Lock()},), ui="none")
    message = str(info.value)
    assert message.startswith("args[0]['lock'] (_thread.lock) cannot be pickled")
    assert "xmp.spawn pickles the function and its arguments" in message
    assert "start_method='fork'" not in message and "cloudpickle" in message


def identity_of(value):
    return value
