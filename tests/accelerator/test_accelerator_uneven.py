"""Uneven inputs, triggers, forced gradient sync and save_model in 2 real ranks (gloo on CPU).

Everything runs in one launch (each costs a second or two); the test then checks each part.
"""

from __future__ import annotations

import copy
import os
import warnings

import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from notebook_launcher import notebook_launcher
from notebook_launcher.accelerator import Accelerator

SAMPLES = 13  # batches of 2: 7 batches, 4 for rank 0 and 3 for rank 1 with even_batches=False


def _data():
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(SAMPLES, 3, generator=g), torch.randn(SAMPLES, 1, generator=g))


def _model():
    torch.manual_seed(2)
    return torch.nn.Linear(3, 1)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(8.0))


def _join_part(accelerator):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(_data(), 2))
    lengths = [len(loader)]
    with accelerator.join_uneven_inputs([model], even_batches=False):
        lengths.append(len(loader))
        for x, y in loader:
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    lengths.append(len(loader))
    errors = []
    try:
        with accelerator.join_uneven_inputs([optimizer]):
            pass
    except TypeError as exc:
        errors.append(str(exc))
    accelerator.prepare(DataLoader(Stream(), batch_size=2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([model], even_batches=False):
            pass
    return {
        "weights": [p.detach().clone() for p in model.parameters()],
        "lengths": lengths,
        "errors": errors,
        "warnings": [str(w.message) for w in caught],
    }


def _trigger_part(accelerator):
    seen = [accelerator.check_trigger()]
    if accelerator.process_index == 1:
        accelerator.set_trigger()
    seen += [accelerator.check_trigger(), accelerator.check_trigger()]
    return seen


def _forced_sync_part(accelerator):
    """Two forwards under no_sync, backward of the first local, the second synchronised."""
    torch.manual_seed(10 + accelerator.process_index)  # different inputs per rank
    xa, xb = torch.randn(4, 3), torch.randn(4, 3)
    results = {}
    for trigger in (True, False):
        model = accelerator.prepare(_model())
        plain = copy.deepcopy(accelerator.unwrap_model(model))
        (plain(xa).square().mean() + plain(xb).square().mean()).backward()
        with accelerator.no_sync(model):
            loss_a, loss_b = model(xa).square().mean(), model(xb).square().mean()
        accelerator.backward(loss_a)
        if trigger:
            with accelerator.trigger_sync_in_backward(model):
                accelerator.backward(loss_b)
        else:
            accelerator.backward(loss_b)
        results[trigger] = {
            "grad": model.module.weight.grad.clone(),
            "local": plain.weight.grad.clone(),
            "mean": accelerator.reduce(plain.weight.grad, reduction="mean"),
        }
    return results


def _save_part(accelerator, directory):
    torch.manual_seed(100 + accelerator.process_index)  # each rank's weights differ
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    accelerator.save_model(model, directory, max_shard_size=40)  # 48 | 16 | 32 + 8 bytes
    alone = os.path.join(directory + "_alone")
    if accelerator.process_index == 1:  # only rank 1 calls it: a non-main rank writes nothing
        accelerator.save_model(model, alone)
    accelerator.wait_for_everyone()
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "alone": sorted(os.listdir(alone)) if os.path.isdir(alone) else None,
    }


def uneven_job(directory):
    accelerator = Accelerator()
    return {
        "join": _join_part(accelerator),
        "trigger": _trigger_part(accelerator),
        "sync": _forced_sync_part(accelerator),
        "save": _save_part(accelerator, directory),
    }


def _join_reference():
    """One process replaying the 4 steps: rank 1 has no 4th batch, so it adds zeros."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(DataLoader(_data(), 2))
    for step in range(4):
        pair = batches[2 * step : 2 * step + 2]
        loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in pair) / 2
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach() for p in model.parameters()]


def test_join_triggers_forced_sync_and_save_model_in_two_ranks(tmp_path):
    directory = str(tmp_path / "model")
    results = notebook_launcher(
        uneven_job, args=(directory,), num_processes=2, output="none", timeout=60
    )
    expected = _join_reference()
    for rank, result in enumerate(results):
        join = result["join"]
        # Prepared with even batches (4 each), 4 and 3 inside the block, restored after it.
        assert join["lengths"] == [4, 4 - rank, 4]
        for got, want in zip(join["weights"], expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        assert len(join["errors"]) == 1
        assert "joinables='[AcceleratedOptimizer]'" in join["errors"][0]
        assert len(join["warnings"]) == 1 and "iterable" in join["warnings"][0]

        assert result["trigger"] == [False, True, False]

        synced, unsynced = result["sync"][True], result["sync"][False]
        torch.testing.assert_close(synced["grad"], synced["mean"])
        torch.testing.assert_close(unsynced["grad"], unsynced["local"])  # no all-reduce
    assert all(a.equal(b) for a, b in zip(*(r["join"]["weights"] for r in results), strict=True))
    assert results[0]["sync"][True]["grad"].equal(results[1]["sync"][True]["grad"])
    assert not results[0]["sync"][False]["grad"].equal(results[1]["sync"][False]["grad"])

    # Written once, by rank 0: its weights; rank 1 alone wrote nothing.
    assert results[1]["save"]["alone"] == []
    names = sorted(os.listdir(directory))
    assert names[-1] == "model.safetensors.index.json" and len(names) == 4
    saved = {}
    for name in names[:-1]:
        saved.update(load_file(os.path.join(directory, name)))
    mine, other = results[0]["save"]["state"], results[1]["save"]["state"]
    assert sorted(saved) == sorted(mine)
    assert all(torch.equal(saved[k], mine[k]) for k in mine)
    assert not all(torch.equal(saved[k], other[k]) for k in mine)
