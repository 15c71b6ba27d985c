"""use_stateful_dataloader=True: prepared loaders (shards and dispatchers) on torchdata's
StatefulDataLoader that resume mid-epoch, directly, through save_state/load_state, across
launched ranks and from Accelerate; Accelerate's own checks of its stateful loaders, run on both."""

from __future__ import annotations

import os
import subprocess
import sys

import accelerate
import pytest
import torch
from accelerate.state import AcceleratorState as TheirState
from accelerate.state import GradientState as TheirGradientState
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from notebook_launcher import Accelerator, DataLoaderConfiguration, notebook_launcher
from notebook_launcher.data import DataLoaderDispatcher, DataLoaderShard, prepare_data_loader
from notebook_launcher.state import PartialState, reset_state

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


@pytest.fixture(autouse=True)
def fresh():
    reset_state()
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()
    yield
    reset_state()
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(17))


def _loader(kind: str, seed: int) -> DataLoader:
    if kind == "iterable":
        return DataLoader(Stream(), batch_size=3)
    generator = torch.Generator().manual_seed(seed)
    workers = {"workers": 2}.get(kind, 0)
    return DataLoader(
        list(range(23)), batch_size=3, shuffle=True, generator=generator, num_workers=workers
    )


def _batches(loader, stop=None):
    out = []
    for i, batch in enumerate(loader):
        out.append((batch[0] if isinstance(batch, list) else batch).tolist())
        if i == stop:
            return out, loader.state_dict()
    return out, None


@pytest.mark.parametrize("kind", ["shuffled", "workers", "iterable"])
@pytest.mark.parametrize("processes", [1, 2])
def test_a_prepared_loader_resumes_mid_epoch(kind, processes):
    for index in range(processes):
        made = lambda seed, index=index: prepare_data_loader(  # noqa: E731
            _loader(kind, seed), None, processes, index, use_stateful_dataloader=True
        )
        loader = made(0)
        assert isinstance(loader, StatefulDataLoader) and isinstance(loader, DataLoaderShard)
        assert loader.use_stateful_dataloader
        full = [_batches(loader)[0] for _ in range(2)]  # two epochs
        loader = made(0)
        _batches(loader)
        head, state = _batches(loader, stop=1)  # half of the second epoch
        torch.manual_seed(123)  # the resumed process's own random state is not the saved one
        resumed = made(7)
        resumed.load_state_dict(state)
        rest, _ = _batches(resumed)
        assert head + rest == full[1]
        assert resumed.iteration == 2 and _batches(resumed)[0] != []


@pytest.mark.parametrize("kind", ["shuffled", "iterable"])
@pytest.mark.parametrize("split", [False, True])
def test_a_dispatcher_resumes_mid_epoch(kind, split):
    def made(seed):
        return prepare_data_loader(
            _loader(kind, seed),
            put_on_device=True,
            dispatch_batches=True,
            split_batches=split,
            use_stateful_dataloader=True,
        )

    loader = made(0)
    assert isinstance(loader, StatefulDataLoader) and isinstance(loader, DataLoaderDispatcher)
    assert (
        type(loader).__name__ == "StatefulDataLoaderDispatcher" and loader.use_stateful_dataloader
    )
    full = [_batches(loader)[0] for _ in range(2)]
    for stop in range(len(full[1])):
        loader = made(0)
        _batches(loader)
        head, state = _batches(loader, stop=stop)
        torch.manual_seed(123)
        resumed = made(7)
        resumed.load_state_dict(state)
        assert head + _batches(resumed)[0] == full[1]
        assert resumed.iteration == 2


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_state_of_torchdata_itself_loads_as_torchdata_loads_it(dispatch):
    reference = StatefulDataLoader(list(range(23)), batch_size=3)
    it = iter(reference)
    next(it), next(it)
    kind = DataLoaderDispatcher if dispatch else DataLoaderShard
    plain = kind(list(range(23)), batch_size=3, use_stateful_dataloader=True)
    assert isinstance(plain, StatefulDataLoader) and isinstance(plain, kind)
    plain.load_state_dict(reference.state_dict())
    assert [b.tolist() for b in plain][0] == [6, 7, 8]
    with pytest.raises(ValueError, match="keys"):  # a shard's state is not a dispatcher's
        other = DataLoaderShard if dispatch else DataLoaderDispatcher
        plain.load_state_dict(other(list(range(23)), use_stateful_dataloader=True).state_dict())


def _dispatched_resumes() -> dict:
    """In each rank: dispatched loaders (shuffled by torch's generator, or iterable) whose last
    global batch is completed with samples of the first; resumed from every position."""
    results = {}
    for split in (False, True):
        for kind in ("shuffled", "iterable"):

            def made(seed, kind=kind, split=split):
                torch.manual_seed(seed)
                data = TensorDataset(torch.arange(23))
                loader = DataLoader(data, batch_size=4, shuffle=True)
                if kind == "iterable":
                    loader = DataLoader(Stream(), batch_size=4)
                return prepare_data_loader(
                    loader,
                    put_on_device=True,
                    dispatch_batches=True,
                    split_batches=split,
                    use_stateful_dataloader=True,
                )

            loader = made(0)
            full = [_batches(loader)[0] for _ in range(2)]
            exact = []
            for epoch in (0, 1):
                for stop in range(len(full[epoch])):
                    loader = made(0)
                    for _ in range(epoch):
                        _batches(loader)
                    head, state = _batches(loader, stop=stop)
                    rng = torch.get_rng_state()  # what load_state restores with the loader
                    resumed = made(1000 + PartialState().process_index)
                    resumed.load_state_dict(state)
                    torch.set_rng_state(rng)
                    rest = [_batches(resumed)[0] for _ in range(2 - epoch)]
                    exact.append([head + rest[0], *rest[1:]] == full[epoch:])
            results[(split, kind)] = (all(exact), len(exact), full[1][-1])
    return results


def test_a_dispatcher_resumes_mid_epoch_on_two_ranks():
    results = notebook_launcher(_dispatched_resumes, num_processes=2, ui="none")
    for rank in (0, 1):
        # 23 samples: 3 global batches of 8 (or 6 of 4, split), the last one completed with
        # the epoch's first sample; 17 streamed: 3 of 8 (or 5 of 4), the last completed so.
        last = [16] if rank == 0 else [0]
        assert {key: value[:2] for key, value in results[rank].items()} == {
            (False, "shuffled"): (True, 6),
            (False, "iterable"): (True, 6),
            (True, "shuffled"): (True, 12),
            (True, "iterable"): (True, 10),
        }
        assert results[rank][(False, "iterable")][2] == results[rank][(True, "iterable")][2] == last


def _train(accelerator, loader, model, optimizer, stop=None):
    seen = []
    for i, (x,) in enumerate(loader):
        seen.append(x[:, 0].tolist())
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if i == stop:
            break
    return seen


def _objects(accelerator, seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.arange(40.0).reshape(20, 2))
    loader = DataLoader(data, batch_size=2, shuffle=True)  # the sampler draws from torch's RNG
    return accelerator.prepare(model, optimizer, loader)


def _resumed_run(directory: str, stateful: bool = True) -> dict:
    """Half an epoch, left with ``break``, saved after the loop; resumed in a fresh Accelerator."""
    config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
    accelerator = Accelerator(dataloader_config=config)
    model, optimizer, loader = _objects(accelerator, 0)
    full = _train(accelerator, loader, model, optimizer)
    final = accelerator.unwrap_model(model).weight.detach().clone()
    reset_state()

    accelerator = Accelerator(dataloader_config=config)
    model, optimizer, loader = _objects(accelerator, 0)
    head = _train(accelerator, loader, model, optimizer, stop=2)
    accelerator.save_state(directory)
    reset_state()

    accelerator = Accelerator(dataloader_config=config)
    model, optimizer, loader = _objects(accelerator, 5)
    accelerator.load_state(directory)
    rest = _train(accelerator, loader, model, optimizer)
    return {
        "batches": head + rest == full,
        "weights": torch.equal(accelerator.unwrap_model(model).weight.detach(), final),
        "count": len(full),
        "resumed": len(rest),
    }


def test_save_state_and_load_state_resume_mid_epoch(tmp_path):
    result = _resumed_run(str(tmp_path / "ckpt"))
    assert result == {"batches": True, "weights": True, "count": 10, "resumed": 7}


def test_without_a_stateful_loader_load_state_leaves_the_loader_where_it_is(tmp_path):
    # As in Accelerate: the resumed loop sees a whole epoch (the code resuming skips itself).
    result = _resumed_run(str(tmp_path / "ckpt"), stateful=False)
    assert result == {"batches": False, "weights": False, "count": 10, "resumed": 10}
    assert not any(name.startswith(("dl_", "dataloader")) for name in os.listdir(tmp_path / "ckpt"))


def test_save_state_and_load_state_resume_mid_epoch_on_two_ranks(tmp_path):
    args = (str(tmp_path / "ckpt"),)
    results = notebook_launcher(_resumed_run, args, num_processes=2, ui="none")
    assert list(results) == [{"batches": True, "weights": True, "count": 5, "resumed": 2}] * 2


def test_a_checkpoint_of_accelerates_resumes_where_accelerate_resumes(tmp_path):
    def run(make, load_from=None):
        config = accelerate.DataLoaderConfiguration(use_stateful_dataloader=True)
        if make is Accelerator:
            config = DataLoaderConfiguration(use_stateful_dataloader=True)
        accelerator = make(cpu=True, dataloader_config=config)
        model, optimizer, loader = _objects(accelerator, 0)
        if load_from is None:
            _train(accelerator, loader, model, optimizer, stop=3)
            accelerator.save_state(str(tmp_path / "ckpt"))
            return None
        torch.manual_seed(42)
        accelerator.load_state(load_from)
        return _train(accelerator, loader, model, optimizer)

    run(accelerate.Accelerator)
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()
    theirs = run(accelerate.Accelerator, str(tmp_path / "ckpt"))
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()
    ours = run(Accelerator, str(tmp_path / "ckpt"))
    assert len(ours) == 6 and ours == theirs


def test_a_checkpoint_written_here_resumes_in_accelerate(tmp_path):
    def run(make, config_class, load_from=None):
        config = config_class(use_stateful_dataloader=True, use_seedable_sampler=True)
        accelerator = make(cpu=True, dataloader_config=config)
        model, optimizer, loader = _objects(accelerator, 0)
        if load_from is not None:
            torch.manual_seed(42)
            accelerator.load_state(load_from)
            return _train(accelerator, loader, model, optimizer)
        head = _train(accelerator, loader, model, optimizer, stop=3)
        accelerator.save_state(str(tmp_path / "ckpt"))
        return head

    head = run(Accelerator, DataLoaderConfiguration)
    assert (tmp_path / "ckpt" / "dl_state_dict.bin").exists()
    ours = run(Accelerator, DataLoaderConfiguration, str(tmp_path / "ckpt"))
    reset_state()
    theirs = run(accelerate.Accelerator, accelerate.DataLoaderConfiguration, str(tmp_path / "ckpt"))
    assert len(head) == 4 and len(ours) == 6 and theirs == ours


class Values(IterableDataset):
    def __init__(self, values):
        self.values = values

    def __iter__(self):
        yield from self.values


def _accelerates_check(package: str, iterable: bool, directory: str | None = None) -> dict:
    """Accelerate's own check of its stateful loaders: iterate a prepared loader, keep its
    state at the third batch (``state_dict()``, or ``save_state`` into ``directory``) and
    the batches after it; after loading that state, the loader gives those batches again."""
    if package == "theirs":
        make, config = accelerate.Accelerator, accelerate.DataLoaderConfiguration
    else:
        make, config = Accelerator, DataLoaderConfiguration
    accelerator = make(dataloader_config=config(use_stateful_dataloader=True))
    size = 32 * accelerator.num_processes
    values = torch.arange(size)[torch.randperm(size, generator=torch.Generator().manual_seed(0))]
    dataset = Values(values) if iterable else TensorDataset(values)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=4))
    unseen, state = [], None
    for step, batch in enumerate(loader):
        if step == 2:
            if directory is None:
                state = loader.state_dict()
            else:
                accelerator.save_state(directory)
        if step > 2:
            unseen.append(batch)
    if directory is None:
        loader.load_state_dict(state)
    else:
        accelerator.load_state(directory)
    resumed = list(loader)

    def gathered(batches):
        return [accelerator.gather(b[0] if isinstance(b, list) else b).tolist() for b in batches]

    return {
        "dispatches": "Dispatcher" in type(loader).__name__,
        "stateful": loader.use_stateful_dataloader,
        "unseen": gathered(unseen),
        "resumed": gathered(resumed),
    }


def _both_checks(package: str) -> list:
    return [_accelerates_check(package, iterable) for iterable in (True, False)]


def test_accelerates_own_stateful_checks_pass_on_two_ranks_as_with_accelerate():
    ours = notebook_launcher(_both_checks, ("ours",), num_processes=2, ui="none")
    theirs = notebook_launcher(_both_checks, ("theirs",), num_processes=2, ui="none")
    for rank in (0, 1):
        assert ours[rank] == theirs[rank]
        # An iterable dataset is dispatched from process 0; a map-style one is sharded.
        assert [(r["dispatches"], r["stateful"]) for r in ours[rank]] == [
            (True, True),
            (False, True),
        ]
        for result in ours[rank]:
            assert result["resumed"] == result["unseen"] and len(result["unseen"]) == 5


def _checks_through_save_state(package: str, directory: str) -> list:
    return [_accelerates_check(package, it, f"{directory}/{it}") for it in (True, False)]


def test_accelerates_own_stateful_checks_through_save_state(tmp_path):
    # Two ranks here; one in Accelerate, whose processes all write dl_state_dict.bin (a
    # dispatcher's process 1 its unused state), so that a second rank may read it half written.
    ours = notebook_launcher(
        _checks_through_save_state, ("ours", str(tmp_path / "ours")), num_processes=2, ui="none"
    )
    for rank in (0, 1):
        for result in ours[rank]:
            assert result["resumed"] == result["unseen"] and len(result["unseen"]) == 5
    theirs = _checks_through_save_state("theirs", str(tmp_path / "theirs"))
    TheirState._reset_state(reset_partial_state=True)
    TheirGradientState._reset_state()
    assert _checks_through_save_state("ours", str(tmp_path / "one")) == theirs


class Note:
    """A value torch.load(..., weights_only=True) refuses."""


def test_a_dispatchers_state_reads_back_with_weights_only(tmp_path):
    def collate(samples):
        return {"x": torch.tensor(samples), "note": Note()}

    for with_note in (False, True):
        loader = prepare_data_loader(
            DataLoader(list(range(10)), batch_size=2, collate_fn=collate if with_note else None),
            put_on_device=True,
            dispatch_batches=True,
            use_stateful_dataloader=True,
        )
        for step, _ in enumerate(loader):
            if step == 1:
                break
        state = loader.state_dict()
        torch.save(state, tmp_path / "state.pt")
        read = torch.load(tmp_path / "state.pt", weights_only=True)
        # Samples that would not read back are left out: the resumed epoch then completes its
        # last batch from its first batch after the resume, as Accelerate's does.
        pad = read["pad"]
        assert pad is None if with_note else torch.equal(pad, torch.tensor([0]))
        assert read["in_epoch"] and read["loader"]["_num_yielded"] == 2


def test_a_stateful_loader_adds_no_warning_of_torchdatas_to_the_users_output():
    # torch warns once per process, so a fresh one shows whether the warning gets out.
    code = (
        "from torch.utils.data import DataLoader\n"
        "from notebook_launcher.data import prepare_data_loader\n"
        "loader = DataLoader(list(range(9)), batch_size=3)\n"
        "list(prepare_data_loader(loader, None, 1, 0, use_stateful_dataloader=True))\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
