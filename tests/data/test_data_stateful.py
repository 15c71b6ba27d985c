"""use_stateful_dataloader=True: prepared loaders on torchdata's StatefulDataLoader that resume
mid-epoch, directly, through save_state/load_state, across launched ranks and from Accelerate."""

from __future__ import annotations

import accelerate
import pytest
import torch
from accelerate.state import AcceleratorState as TheirState
from accelerate.state import GradientState as TheirGradientState
from torch.utils.data import DataLoader, IterableDataset

from notebook_launcher import Accelerator, DataLoaderConfiguration, notebook_launcher
from notebook_launcher.data import DataLoaderShard, prepare_data_loader
from notebook_launcher.state import reset_state

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
        out.append(batch.tolist())
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


def test_a_state_of_torchdata_itself_loads_as_torchdata_loads_it():
    loader = prepare_data_loader(_loader("shuffled", 0), use_stateful_dataloader=True)
    reference = StatefulDataLoader(list(range(23)), batch_size=3)
    it = iter(reference)
    next(it), next(it)
    plain = DataLoaderShard(list(range(23)), batch_size=3, use_stateful_dataloader=True)
    plain.load_state_dict(reference.state_dict())
    assert [b.tolist() for b in plain][0] == [6, 7, 8]
    with pytest.raises(NotImplementedError, match="dispatch_batches"):
        prepare_data_loader(
            loader, put_on_device=True, dispatch_batches=True, use_stateful_dataloader=True
        )


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
    }


@pytest.mark.parametrize("stateful", [True, False])
def test_save_state_and_load_state_resume_mid_epoch(tmp_path, stateful):
    result = _resumed_run(str(tmp_path / "ckpt"), stateful)
    assert result == {"batches": True, "weights": True, "count": 10}


def test_save_state_and_load_state_resume_mid_epoch_on_two_ranks(tmp_path):
    args = (str(tmp_path / "ckpt"),)
    results = notebook_launcher(_resumed_run, args, num_processes=2, ui="none")
    assert list(results) == [{"batches": True, "weights": True, "count": 5}] * 2


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
