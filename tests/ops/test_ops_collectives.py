"""Every collective across 2 and 3 real ranks started by notebook_launcher (gloo on CPU).

One launch per configuration runs every operation on inputs each rank derives from its index;
the kernel checks every rank's results against what the ranks' inputs imply.
"""

from __future__ import annotations

import time
from collections import OrderedDict, defaultdict, namedtuple

import pytest
import torch

from notebook_launcher import PartialState, notebook_launcher, ops
from notebook_launcher.backends import shared_memory
from notebook_launcher.ops.communicator import current
from notebook_launcher.utils.environment import cuda_device_count

Pair = namedtuple("Pair", "first second")
GPUS = cuda_device_count()
BIG = 40_000  # float32 elements: above the packing threshold, so sent on its own


def same_shaped(rank: int):
    """Rank ``rank``'s input to gather, broadcast and reduce: the same layout on every rank."""
    base = torch.arange(12, dtype=torch.float32).view(3, 4) + 100 * rank
    return {
        "f32": base,
        "f16": (base / 8).half(),
        "bf16": [base.bfloat16(), torch.tensor(rank + 0.5, dtype=torch.bfloat16)],
        "i64": Pair(torch.tensor([rank, rank + 1]), torch.tensor(7 * rank)),
        "bool": torch.tensor([rank % 2 == 0, True, False]),
        "bool2": torch.tensor([[rank == 1], [False]]),  # two bool tensors: packed together
        "f64": OrderedDict(x=torch.full((2, 2), rank / 3, dtype=torch.float64)),
        "strided": base.t(),  # not contiguous
        "empty": torch.zeros(0, 5) + rank,
        "big": defaultdict(list, v=torch.full((BIG,), float(rank))),
        "big_strided": torch.full((2, BIG), float(rank)).t(),
    }


def random_values(rank: int) -> torch.Tensor:
    """Rank ``rank``'s float32 values of every magnitude, to average."""
    generator = torch.Generator().manual_seed(rank)
    exponents = torch.randint(-30, 30, (BIG,), generator=generator).float()
    return torch.randn(BIG, generator=generator) * 10.0**exponents


def ragged(rank: int):
    """Rank ``rank``'s input to pad_across_processes: sizes differ along the padded dimensions."""
    return {
        "rows": torch.arange(2 * (rank + 1), dtype=torch.int64).view(rank + 1, 2),
        "cols": torch.ones(2, rank + 1, 3),
        "scalar": torch.tensor(float(rank)),
        "empty": torch.ones(rank, 4),
        "big": torch.full((BIG + rank,), float(rank)),
    }


def exercise(debug: bool):
    state = PartialState(debug=debug)
    rank, world, device = state.process_index, state.num_processes, state.device
    out: dict = {"world": world}

    out["gather"] = ops.gather(ops.send_to_device(same_shaped(rank), device))
    out["gather_tensor"] = ops.gather(torch.tensor([rank, rank], device=device))
    out["gather_0d"] = ops.gather(torch.tensor(float(rank), device=device))
    out["gather_object"] = ops.gather_object([rank, f"r{rank}"])
    out["gather_object_dict"] = ops.gather_object({"rank": rank})

    for src in (0, world - 1):
        mine = ops.send_to_device(same_shaped(rank), device)
        strided, big_strided = mine["strided"], mine["big_strided"]
        returned = ops.broadcast(mine, from_process=src)
        # In place: the same objects, non-contiguous ones included, now hold src's values.
        assert returned is mine and mine["strided"] is strided
        assert mine["big_strided"] is big_strided
        out[f"broadcast_from_{src}"] = mine
        objects = [{"from": rank}, f"r{rank}"] if rank == src else [None, None]
        out[f"objects_from_{src}"] = ops.broadcast_object_list(objects, from_process=src)

    data = ops.send_to_device(same_shaped(rank), device)
    out["sum"] = ops.reduce(data, reduction="sum")
    out["mean"] = ops.reduce(data, reduction="mean", scale=2.0)
    out["none"] = ops.reduce(data, reduction="none")
    out["max"] = ops.reduce(data, reduction="max")
    out["unchanged"] = torch.equal(data["f32"], same_shaped(rank)["f32"].to(device))
    out["mean_random"] = ops.reduce(random_values(rank).to(device))

    for dim, pad_first in ((0, False), (-1, True), (1, False)):
        padded = ops.pad_across_processes(
            ops.send_to_device(ragged(rank), device), dim=dim, pad_index=-1, pad_first=pad_first
        )
        out[f"pad_{dim}_{pad_first}"] = padded
        if dim == 0:  # padded tensors gather
            out["gather_padded"] = ops.gather({k: padded[k] for k in ("rows", "big")})

    exchange = getattr(current(), "_exchange", None)
    out["transport"] = "shared memory" if exchange is not None else "other"

    if state.is_last_process:
        time.sleep(0.3)
    before = time.monotonic()
    ops.wait_for_everyone()
    out["waited"] = time.monotonic() - before
    return out


def _cat(tensors):
    return torch.cat([t.reshape(1) if t.ndim == 0 else t for t in tensors])


def assert_equal(actual, expected):
    assert type(actual) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert torch.equal(actual, expected), (actual, expected)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_equal(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_equal(a, e)
    else:
        assert actual == expected


def leafwise(function, structures):
    """``function`` of the matching leaves of ``structures``, in the layout of the first."""
    first = structures[0]
    if isinstance(first, torch.Tensor):
        return function([s for s in structures])
    if isinstance(first, dict):
        return ops.honor_type(
            first, [(k, leafwise(function, [s[k] for s in structures])) for k in first]
        )
    return ops.honor_type(
        first, [leafwise(function, [s[i] for s in structures]) for i in range(len(first))]
    )


def _summed(tensors):
    stacked = torch.stack([t.to(torch.int64) if t.dtype == torch.bool else t for t in tensors])
    return stacked.sum(0).to(stacked.dtype)


def _largest(tensors):
    return torch.stack(tensors).amax(0)


def _mean_times_two(tensors):
    return _summed(tensors) / len(tensors) * 2.0  # integers: a float mean, as reduce gives


def _padded(tensors, dim, pad_first):
    ndim = tensors[0].ndim
    if not -ndim <= dim < ndim:
        return tensors
    largest = max(t.shape[dim] for t in tensors)
    out = []
    for t in tensors:
        missing = largest - t.shape[dim]
        fill = t.new_full((*t.shape[: dim % ndim], missing, *t.shape[dim % ndim + 1 :]), -1)
        out.append(torch.cat([fill, t] if pad_first else [t, fill], dim=dim))
    return out


def needs_devices(world: int):
    """On CUDA machines the launcher runs nccl, one GPU per rank."""
    return pytest.mark.skipif(
        0 < GPUS < world, reason=f"{world} ranks on CUDA need {world} GPUs, {GPUS} here"
    )


@pytest.mark.parametrize(
    ("world", "debug", "transport"),
    [
        pytest.param(2, False, "shared memory", marks=needs_devices(2)),
        pytest.param(3, False, "shared memory", marks=needs_devices(3)),
        pytest.param(2, True, "shared memory", marks=needs_devices(2)),
        pytest.param(2, False, "gloo", marks=needs_devices(2)),
        pytest.param(3, False, "gloo", marks=needs_devices(3)),
    ],
    ids=["2-ranks", "3-ranks", "2-ranks-debug-mode", "2-ranks-gloo", "3-ranks-gloo"],
)
def test_every_collective_across_ranks(world, debug, transport, monkeypatch):
    if transport == "gloo":  # on CPU, tensors otherwise go through shared memory
        monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")
    elif GPUS == 0 and not shared_memory.supported():
        pytest.skip("shared memory needs x86-64 Linux with /dev/shm")
    results = notebook_launcher(exercise, args=(debug,), num_processes=world, output="none")
    expected_transport = "shared memory" if GPUS == 0 and transport != "gloo" else "other"
    assert {out["transport"] for out in results} == {expected_transport}
    inputs = [same_shaped(r) for r in range(world)]
    gathered = leafwise(_cat, inputs)
    for rank, out in enumerate(results):
        assert out["world"] == world
        assert_equal(out["gather"], gathered)
        assert_equal(out["gather_tensor"], torch.tensor([r for r in range(world) for _ in "ab"]))
        assert_equal(out["gather_0d"], torch.arange(world, dtype=torch.float32))
        assert out["gather_object"] == [x for r in range(world) for x in (r, f"r{r}")]
        assert out["gather_object_dict"] == [{"rank": r} for r in range(world)]
        for src in (0, world - 1):
            assert_equal(out[f"broadcast_from_{src}"], same_shaped(src))
            assert out[f"objects_from_{src}"] == [{"from": src}, f"r{src}"]
        assert_equal(out["sum"], leafwise(_summed, inputs))
        assert_equal(out["none"], leafwise(lambda ts, r=rank: ts[r].clone(), inputs))
        assert_equal(out["max"], leafwise(_largest, inputs))
        mean = out["mean"]
        assert mean["i64"].first.dtype == torch.float32  # the mean of integers is a float
        expected_mean = leafwise(_mean_times_two, inputs)
        for key in ("f32", "big", "strided"):
            assert_equal(mean[key], expected_mean[key])
        assert torch.allclose(mean["f64"]["x"], expected_mean["f64"]["x"])
        assert torch.allclose(mean["i64"].first, expected_mean["i64"].first.float())
        assert torch.allclose(mean["bool"], expected_mean["bool"].float())
        assert torch.allclose(mean["bool2"], expected_mean["bool2"].float())
        assert torch.allclose(mean["f16"].float(), expected_mean["f16"].float(), rtol=1e-3)
        assert out["unchanged"]
        values = torch.stack([random_values(r) for r in range(world)])
        if world == 2:  # averaged by halving while copying: the same bits as the sum halved
            assert_equal(out["mean_random"], (values[0] + values[1]) / 2)
        else:  # gloo may add in another order: rounding of the largest term
            error = (out["mean_random"] - values.sum(0) / world).abs()
            assert (error <= 1e-6 * values.abs().sum(0)).all()
        for dim, pad_first in ((0, False), (-1, True), (1, False)):
            expected = leafwise(
                lambda ts, d=dim, p=pad_first, r=rank: _padded(ts, d, p)[r],
                [ragged(r) for r in range(world)],
            )
            assert_equal(out[f"pad_{dim}_{pad_first}"], expected)
        padded_rows = [
            _padded([ragged(r)["rows"] for r in range(world)], 0, False)[r] for r in range(world)
        ]
        assert_equal(out["gather_padded"]["rows"], torch.cat(padded_rows))
        assert out["gather_padded"]["big"].shape == (world * (BIG + world - 1),)
        if rank != world - 1:
            assert out["waited"] > 0.2  # waited for the last rank's sleep


def reduce_like_accelerate():
    import accelerate
    import accelerate.utils

    theirs = accelerate.PartialState(cpu=True)
    ours = PartialState()  # adopts the process group Accelerate created
    rank = ours.process_index
    assert theirs.num_processes == ours.num_processes == 2
    data = {"f": torch.tensor([1.5, -2.0]) * (rank + 1), "i": [torch.tensor([rank, 7 - rank])]}
    pairs = {}
    for reduction in ("sum", "mean", "max"):
        if reduction == "mean":  # Accelerate's mean of integers fails: floats only
            data = {"f": data["f"]}
        pairs[reduction] = (ops.reduce(data, reduction), accelerate.utils.reduce(data, reduction))
    return pairs


def test_reduce_across_ranks_matches_accelerate():
    import accelerate  # noqa: F401 (imported once here, not by every forked worker)

    for pairs in notebook_launcher(reduce_like_accelerate, num_processes=2, output="none"):
        for reduction, (ours, theirs) in pairs.items():
            assert ops.listify(ours) == ops.listify(theirs), reduction
