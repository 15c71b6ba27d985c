"""Checkpoints interchange with Accelerate's: each side's ``load_state`` reads the other's
``save_state`` (weights, optimizer, scheduler, random streams), and ``save_model`` files match."""

from __future__ import annotations

import json
import os
import random

import accelerate
import numpy as np
import pytest
import torch
from accelerate.state import AcceleratorState as TheirState
from accelerate.state import GradientState as TheirGradientState
from safetensors.torch import load_file

from notebook_launcher import Accelerator, DataLoaderConfiguration, notebook_launcher
from notebook_launcher.state import reset_state

pytestmark = [
    pytest.mark.usefixtures("no_accelerate_state"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
]


def _forget_theirs():
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()


class Net(torch.nn.Module):
    def __init__(self, tied: bool = False):
        super().__init__()
        self.embed = torch.nn.Embedding(7, 4)
        self.hidden = torch.nn.Linear(4, 4)
        self.out = torch.nn.Linear(4, 7, bias=False)
        if tied:
            self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(torch.relu(self.hidden(self.embed(x))))


def _objects(seed: int, tied: bool = False):
    torch.manual_seed(seed)
    model = Net(tied)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _train(accelerator, model, optimizer, scheduler, steps: int = 3) -> None:
    for step in range(steps):
        x = torch.randint(0, 7, (5,), generator=torch.Generator().manual_seed(step))
        loss = torch.nn.functional.cross_entropy(model(x), x)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _draws() -> tuple:
    """The next values of every random stream a checkpoint restores."""
    return (torch.rand(4).tolist(), random.random(), float(np.random.rand()))


def _state(model, optimizer, scheduler) -> dict:
    inner = getattr(model, "module", model)
    return {
        "weights": {k: v.clone() for k, v in inner.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def _assert_same(a: dict, b: dict) -> None:
    assert a["weights"].keys() == b["weights"].keys()
    for key in a["weights"]:
        torch.testing.assert_close(a["weights"][key], b["weights"][key], rtol=0, atol=0)
    assert a["scheduler"] == b["scheduler"]
    opt_a, opt_b = a["optimizer"], b["optimizer"]
    assert opt_a["param_groups"] == opt_b["param_groups"]
    assert opt_a["state"].keys() == opt_b["state"].keys()
    for index, entry in opt_a["state"].items():
        for name, value in entry.items():
            torch.testing.assert_close(value, opt_b["state"][index][name], rtol=0, atol=0)


def _save_with_accelerate(directory: str, tied: bool = False) -> tuple[dict, tuple]:
    theirs = accelerate.Accelerator(cpu=True)
    objects = theirs.prepare(*_objects(0, tied))
    _train(theirs, *objects)
    theirs.save_state(directory)
    expected = _state(*objects), _draws()
    _forget_theirs()
    return expected


def test_accelerate_checkpoint_loads_here(tmp_path):
    saved, draws = _save_with_accelerate(str(tmp_path / "ckpt"))
    ours = Accelerator(cpu=True)
    objects = ours.prepare(*_objects(1))
    _train(ours, *objects, steps=1)  # something else, overwritten by the load
    torch.manual_seed(99)
    ours.load_state(str(tmp_path / "ckpt"))
    _assert_same(_state(*objects), saved)
    assert _draws() == draws


def test_checkpoint_written_here_loads_in_accelerate(tmp_path):
    ours = Accelerator(cpu=True)
    objects = ours.prepare(*_objects(0))
    _train(ours, *objects)
    ours.save_state(str(tmp_path / "ckpt"))
    saved, draws = _state(*objects), _draws()
    reset_state()

    theirs = accelerate.Accelerator(cpu=True)
    loaded = theirs.prepare(*_objects(1))
    torch.manual_seed(99)
    theirs.load_state(str(tmp_path / "ckpt"))
    _assert_same(_state(*loaded), saved)
    assert _draws() == draws


def test_training_resumed_across_packages_matches_an_uninterrupted_run(tmp_path):
    ours = Accelerator(cpu=True)
    objects = ours.prepare(*_objects(0))
    _train(ours, *objects, steps=5)
    uninterrupted = _state(*objects)
    reset_state()

    _save_with_accelerate(str(tmp_path / "ckpt"))  # the first 3 steps, in Accelerate
    resumed = Accelerator(cpu=True)
    objects = resumed.prepare(*_objects(2))
    resumed.load_state(str(tmp_path / "ckpt"))
    for step in (3, 4):  # the same two batches the uninterrupted run saw last
        x = torch.randint(0, 7, (5,), generator=torch.Generator().manual_seed(step))
        resumed.backward(torch.nn.functional.cross_entropy(objects[0](x), x))
        objects[1].step()
        objects[2].step()
        objects[1].zero_grad()
    _assert_same(_state(*objects), uninterrupted)


def test_tied_weights_saved_by_accelerate_load_strictly(tmp_path):
    saved, _ = _save_with_accelerate(str(tmp_path / "ckpt"), tied=True)
    assert "out.weight" not in load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    ours = Accelerator(cpu=True)
    model, optimizer, scheduler = ours.prepare(*_objects(1, tied=True))
    ours.load_state(str(tmp_path / "ckpt"))
    _assert_same(_state(model, optimizer, scheduler), saved)
    assert model.out.weight is model.embed.weight


def test_load_model_func_kwargs_reach_load_state_dict(tmp_path):
    _save_with_accelerate(str(tmp_path / "ckpt"))
    ours = Accelerator(cpu=True)
    model, optimizer, scheduler = ours.prepare(*_objects(1))
    model.extra = torch.nn.Linear(2, 2)  # not in the checkpoint
    with pytest.raises(RuntimeError, match="extra.weight"):
        ours.load_state(str(tmp_path / "ckpt"))
    ours.load_state(str(tmp_path / "ckpt"), strict=False)
    ours.load_state(str(tmp_path / "ckpt"), strict=False, map_location="cpu")
    with pytest.raises(TypeError):
        ours.load_state(str(tmp_path / "ckpt"), map_location="gpu0")


def test_rng_file_is_a_torch_archive_with_accelerates_keys(tmp_path):
    ours = Accelerator(cpu=True)
    ours.prepare(*_objects(0))
    ours.save_state(str(tmp_path / "ckpt"))
    from accelerate.utils import load

    states = load(str(tmp_path / "ckpt" / "random_states_0.pkl"))  # weights_only, as Accelerate
    assert {"step", "random_state", "numpy_random_seed", "torch_manual_seed"} <= set(states)


@pytest.mark.parametrize("shard", ["10GB", 200])
@pytest.mark.parametrize("safe", [True, False])
def test_save_model_writes_what_accelerate_writes(tmp_path, shard, safe):
    theirs = accelerate.Accelerator(cpu=True)
    model = theirs.prepare(_objects(0)[0])
    theirs.save_model(
        model, str(tmp_path / "theirs"), max_shard_size=shard, safe_serialization=safe
    )
    _forget_theirs()
    ours = Accelerator(cpu=True)
    model = ours.prepare(_objects(0)[0])
    ours.save_model(model, str(tmp_path / "ours"), max_shard_size=shard, safe_serialization=safe)

    names = sorted(os.listdir(tmp_path / "theirs"))
    assert sorted(os.listdir(tmp_path / "ours")) == names

    def read(folder):
        tensors = {}
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".json"):
                index = json.load(open(path))
                tensors["weight_map"] = index["weight_map"]
            elif safe:
                tensors.update(load_file(path))
            else:
                tensors.update(torch.load(path, weights_only=True))
        return tensors

    a, b = read(tmp_path / "theirs"), read(tmp_path / "ours")
    assert a.keys() == b.keys()
    for key in a:
        if key == "weight_map":
            assert set(a[key]) == set(b[key])
        else:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    # Accelerate's reader takes ours.
    fresh = _objects(5)[0]
    accelerate.utils.load_checkpoint_in_model(fresh, str(tmp_path / "ours"))
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, b[key], rtol=0, atol=0)


def _launched_save_or_load(kind: str, directory: str, load: bool) -> dict:
    """In a launched rank: train and save, or load; return the weights and the next draws."""
    make = accelerate.Accelerator if kind == "theirs" else Accelerator
    accelerator = make()
    objects = accelerator.prepare(*_objects(1 if load else 0))
    if load:
        accelerator.load_state(directory)
    else:
        _train(accelerator, *objects)
        accelerator.save_state(directory)
    return {"state": _state(*objects), "draws": _draws()}


@pytest.mark.parametrize("saver, loader", [("theirs", "ours"), ("ours", "theirs")])
def test_checkpoints_of_a_two_rank_job_interchange(tmp_path, saver, loader):
    directory = str(tmp_path / "ckpt")
    saved = notebook_launcher(
        _launched_save_or_load, (saver, directory, False), num_processes=2, ui="none"
    )
    loaded = notebook_launcher(
        _launched_save_or_load, (loader, directory, True), num_processes=2, ui="none"
    )
    for rank in (0, 1):
        _assert_same(loaded[rank]["state"], saved[rank]["state"])
        assert loaded[rank]["draws"] == saved[rank]["draws"]  # each rank's own streams
    assert saved[0]["draws"] != saved[1]["draws"]


def test_a_compiled_model_is_saved_and_loaded_without_the_wrappers_prefix(tmp_path):
    ours = Accelerator(cpu=True, dynamo_backend="eager")
    objects = ours.prepare(*_objects(0))
    _train(ours, *objects)
    ours.save_state(str(tmp_path / "ckpt"))
    saved = _state(ours.unwrap_model(objects[0], keep_torch_compile=False), *objects[1:])
    assert not any("_orig_mod" in k for k in load_file(str(tmp_path / "ckpt/model.safetensors")))
    reset_state()
    theirs = accelerate.Accelerator(cpu=True)
    loaded = theirs.prepare(*_objects(1))
    theirs.load_state(str(tmp_path / "ckpt"))
    _assert_same(_state(*loaded), saved)
    _forget_theirs()
    again = Accelerator(cpu=True, dynamo_backend="eager")
    objects = again.prepare(*_objects(1))
    again.load_state(str(tmp_path / "ckpt"))
    _assert_same(
        _state(again.unwrap_model(objects[0], keep_torch_compile=False), *objects[1:]), saved
    )


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(torch.arange(40.0).reshape(20, 2))


class Counter:
    """A custom object registered for checkpointing."""

    def __init__(self):
        self.count = 3

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


def _save_a_run(package: str, directory: str, stateful: bool, stop: int) -> list[str]:
    """Train the objects of a typical script (two loaders, one of them iterable, a registered
    object, gradient accumulation) for ``stop + 1`` steps, save, and list the directory."""
    make, config = Accelerator, DataLoaderConfiguration
    if package == "theirs":
        make, config = accelerate.Accelerator, accelerate.DataLoaderConfiguration
    config = config(use_stateful_dataloader=stateful, use_seedable_sampler=True)
    accelerator = make(dataloader_config=config, gradient_accumulation_steps=2)
    model, optimizer, scheduler = _objects(0)
    data = torch.utils.data.TensorDataset(torch.arange(40).reshape(20, 2) % 7)
    loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=True)
    stream = torch.utils.data.DataLoader(Stream(), batch_size=2)
    model, optimizer, scheduler, loader, stream = accelerator.prepare(
        model, optimizer, scheduler, loader, stream
    )
    accelerator.register_for_checkpointing(Counter())
    for step, (x,) in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.cross_entropy(model(x[:, 0]), x[:, 1]))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        if step == stop:
            break
    accelerator.save_state(directory)
    accelerator.wait_for_everyone()
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize("stop", [1, 2])  # after a step, inside an accumulation window
def test_save_state_writes_the_files_accelerate_writes(tmp_path, stateful, stop):
    theirs = _save_a_run("theirs", str(tmp_path / "theirs"), stateful, stop)
    _forget_theirs()
    ours = _save_a_run("ours", str(tmp_path / "ours"), stateful, stop)
    loader_files = ["dl_state_dict.bin", "dl_state_dict_1.bin"] if stateful else []
    assert theirs == sorted(
        [
            "custom_checkpoint_0.pkl",
            "model.safetensors",
            "optimizer.bin",
            "random_states_0.pkl",
            "scheduler.bin",
            *loader_files,
        ]
    )
    # An exact resume inside an accumulation window also keeps the gradients accumulated.
    extra = ["gradients_0.bin"] if stateful and stop == 2 else []
    assert ours == sorted(theirs + extra)


def _launched_listing(package: str, directory: str, stateful: bool) -> list[str]:
    return _save_a_run(package, directory, stateful, stop=1)


@pytest.mark.parametrize("stateful", [False, True])
def test_save_state_of_two_ranks_writes_the_files_accelerate_writes(tmp_path, stateful):
    listings = {
        package: notebook_launcher(
            _launched_listing,
            (package, str(tmp_path / package), stateful),
            num_processes=2,
            ui="none",
        )
        for package in ("theirs", "ours")
    }
    assert listings["ours"][0] == listings["theirs"][0]
    assert {"random_states_0.pkl", "random_states_1.pkl"} <= set(listings["ours"][0])
    assert ("dl_state_dict.bin" in listings["ours"][0]) is stateful


def _resume_as_scripts_do(package: str, directory: str, stateful: bool, shuffle: bool) -> dict:
    """Accelerate's resume recipe: train 2 epochs, saving after the 3rd step of the second;
    then, in a new run, ``load_state`` and finish, skipping the steps already done with
    ``skip_first_batches`` (without stateful loaders) or not (with them)."""

    def run(resume: bool) -> tuple[list, dict]:
        make, config = Accelerator, DataLoaderConfiguration
        if package == "theirs":
            make, config = accelerate.Accelerator, accelerate.DataLoaderConfiguration
        accelerator = make(dataloader_config=config(use_stateful_dataloader=stateful))
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        data = torch.utils.data.TensorDataset(torch.arange(48.0).reshape(24, 2) / 48)
        loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=shuffle)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        starting_epoch, resume_step, seen = 0, None, []
        if resume:
            accelerator.load_state(directory)
            starting_epoch, resume_step = 1, 3
        for epoch in range(starting_epoch, 2):
            active = loader
            if epoch == starting_epoch and resume_step is not None and not stateful:
                active = accelerator.skip_first_batches(loader, resume_step)
            for step, (x,) in enumerate(active, start=resume_step if active is not loader else 0):
                seen.append(accelerator.gather(x).tolist())
                accelerator.backward(model(x).pow(2).mean())
                optimizer.step()
                optimizer.zero_grad()
                if not resume and epoch == 1 and step == 2:
                    accelerator.save_state(directory)
        accelerator.wait_for_everyone()
        weights = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        return seen, weights

    whole, final = run(resume=False)
    if package == "theirs":
        TheirState._reset_state(reset_partial_state=True)
        TheirGradientState._reset_state()
    else:
        reset_state()
    rest, resumed = run(resume=True)
    return {
        "files": sorted(os.listdir(directory)),
        "whole": whole,
        "rest": rest,
        "final": final,
        "resumed": resumed,
    }


@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_accelerates_resume_recipe_sees_the_batches_it_sees_in_accelerate(
    tmp_path, stateful, shuffle
):
    results = {
        package: notebook_launcher(
            _resume_as_scripts_do,
            (package, str(tmp_path / package), stateful, shuffle),
            num_processes=2,
            ui="none",
        )
        for package in ("theirs", "ours")
    }
    ours, theirs = results["ours"][0], results["theirs"][0]
    assert ours["files"] == theirs["files"]
    assert ours["whole"] == theirs["whole"] and len(ours["whole"]) == 12
    for name, value in theirs["final"].items():
        assert torch.equal(ours["final"][name], value)
    if stateful and shuffle:
        # Accelerate draws the resumed epoch's order again from the generators' states at the
        # save; here the epoch continues as it would have.
        assert ours["rest"] == ours["whole"][9:] != theirs["rest"]
        return
    assert ours["rest"] == theirs["rest"]
    for name, value in theirs["resumed"].items():
        assert torch.equal(ours["resumed"][name], value)
    # The steps already done are skipped once: 3 of the 6 in the second epoch.
    assert len(ours["rest"]) == 3
    if not shuffle:
        assert ours["rest"] == ours["whole"][9:]


class Numbers(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(torch.arange(48.0).reshape(24, 2))


def _next_batches(package: str, directory: str, stateful: bool, load: bool, dispatched: bool):
    """Save after 3 batches of each loader (a sharded one, and a dispatched one if asked), or
    load and return the first batch each loader gives next (over all processes)."""
    make, config = Accelerator, DataLoaderConfiguration
    if package == "theirs":
        make, config = accelerate.Accelerator, accelerate.DataLoaderConfiguration
    accelerator = make(dataloader_config=config(use_stateful_dataloader=stateful))
    data = torch.utils.data.TensorDataset(torch.arange(48.0).reshape(24, 2))
    loaders = [torch.utils.data.DataLoader(data, batch_size=2)]
    if dispatched:
        loaders.append(torch.utils.data.DataLoader(Numbers(), batch_size=2))
    model, optimizer, scheduler, *loaders = accelerator.prepare(*_objects(0), *loaders)
    if not load:
        for loader in loaders:
            for step, _ in enumerate(loader):
                if step == 2:
                    break
        accelerator.save_state(directory)
        accelerator.wait_for_everyone()
        return None
    accelerator.load_state(directory)
    nexts = []
    for loader in loaders:
        batch = next(iter(loader))
        x = batch[0] if isinstance(batch, list) else batch
        nexts.append(accelerator.gather(x)[:, 0].div(2).int().tolist())
    return nexts


def _expected_next(stateful: bool, processes: int, dispatched: bool) -> list:
    """Without stateful loaders a loaded checkpoint leaves them at the start of the epoch (as
    in Accelerate); with them, the 4th batch comes next: samples 4k ... of all processes."""
    size = 2 * processes
    step = 3 if stateful else 0
    return [list(range(step * size, (step + 1) * size))] * (2 if dispatched else 1)


@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize("saver", ["theirs", "ours"])
def test_loader_positions_in_checkpoints_interchange(tmp_path, saver, stateful):
    directory = str(tmp_path / "ckpt")
    _next_batches(saver, directory, stateful, load=False, dispatched=True)
    _forget_theirs()
    reset_state()
    loaded = {}
    for package in ("theirs", "ours"):
        loaded[package] = _next_batches(package, directory, stateful, load=True, dispatched=True)
        _forget_theirs()
        reset_state()
    assert loaded["ours"] == loaded["theirs"] == _expected_next(stateful, 1, True)


@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize("saver", ["theirs", "ours"])
def test_loader_positions_in_checkpoints_of_two_ranks_interchange(tmp_path, saver, stateful):
    # Not a dispatcher saved by Accelerate with stateful loaders: all its processes write
    # dl_state_dict.bin, process 1 the state of a loader it never read, so the file holds
    # either state (or a mix of both).
    dispatched = not (saver == "theirs" and stateful)
    directory = str(tmp_path / "ckpt")
    args = (directory, stateful)
    notebook_launcher(_next_batches, (saver, *args, False, dispatched), num_processes=2, ui="none")
    for package in ("theirs", "ours"):
        loaded = notebook_launcher(
            _next_batches, (package, *args, True, dispatched), num_processes=2, ui="none"
        )
        assert list(loaded) == [_expected_next(stateful, 2, dispatched)] * 2, package


def test_stateful_loaders_states_in_the_rng_file_are_read_by_accelerates_loader(tmp_path):
    # Accelerate reads random_states_<rank>.pkl with weights_only=True, and skips all of it
    # (silently) if that fails: the loaders' states kept there must read so too.
    directory = str(tmp_path / "ckpt")
    _next_batches("ours", directory, stateful=True, load=False, dispatched=True)
    from accelerate.utils import load

    states = load(os.path.join(directory, "random_states_0.pkl"))
    shard, dispatcher = states["dataloader_states"]
    assert shard["in_epoch"] and dispatcher["in_epoch"]
    assert torch.equal(dispatcher["pad"], torch.tensor([[0.0, 1.0]]))  # the epoch's first sample
    assert load(os.path.join(directory, "dl_state_dict_1.bin")) == dispatcher["loader"]
