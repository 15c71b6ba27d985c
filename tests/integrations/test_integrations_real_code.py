"""Users' own training code under the launcher: HF Trainer, real Accelerate, Lightning Fabric and
plain DDP, each 2 CPU ranks (gloo) forming one job, with its metrics in the final panel model.

The libraries are imported here before launching (a module fixture), so the forked workers do
not each import them again; nothing is downloaded: models are built from configs.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from notebook_launcher import notebook_launcher

SAMPLES = 256
BATCH = 16  # per process


@pytest.fixture(scope="module", autouse=True)
def libraries():
    for name in ("transformers.trainer", "lightning.fabric", "accelerate"):
        importlib.import_module(name)


def points(model, name, rank):
    series = model.metrics[name].per_rank.get(rank)
    return series.points() if series is not None else []


# -- transformers.Trainer --------------------------------------------------------------------------


def tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    torch.manual_seed(0)
    return BertForSequenceClassification(config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (count, 8), generator=generator)
        self.labels = (self.ids[:, 0] > 31).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.labels[index], "index": index}


def train_with_trainer(output_dir: str, explicit_callback: bool, disable_tqdm: bool = True) -> dict:
    from transformers import Trainer, TrainingArguments

    from notebook_launcher.integrations.transformers import NotebookCallback

    seen: list[int] = []

    def collate(features):
        seen.extend(int(f.pop("index")) for f in features)
        return {k: torch.stack([f[k] for f in features]) for k in features[0]}

    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=BATCH,
        num_train_epochs=1,
        logging_steps=2,
        report_to="none",
        save_strategy="no",
        disable_tqdm=disable_tqdm,
        remove_unused_columns=False,
    )
    callbacks = [NotebookCallback()] if explicit_callback else None
    trainer = Trainer(
        model=tiny_bert(),
        args=args,
        train_dataset=Tokens(SAMPLES),
        data_collator=collate,
        callbacks=callbacks,
    )
    out = trainer.train()
    return {
        "world": trainer.args.world_size,
        "distributed": trainer.accelerator.distributed_type.value,
        "steps": out.global_step,
        "seen": seen,
        "callbacks": [type(c).__name__ for c in trainer.callback_handler.callbacks],
    }


@pytest.mark.parametrize(
    ("explicit_callback", "kernel"),
    [(False, False), (True, False), (False, True)],
    ids=["default", "also-passed", "from-a-kernel"],
)
def test_hf_trainer_trains_as_one_job_and_fills_the_panels(
    tmp_path, explicit_callback, kernel, monkeypatch
):
    if kernel:  # transformers imported in a Jupyter kernel picks its notebook progress display
        import transformers.trainer as trainer
        from transformers.utils.notebook import NotebookProgressCallback

        monkeypatch.setattr(trainer, "DEFAULT_PROGRESS_CALLBACK", NotebookProgressCallback)
    result = notebook_launcher(
        train_with_trainer,
        (str(tmp_path), explicit_callback, not kernel),
        num_processes=2,
        output="none",
    )
    steps = SAMPLES // (2 * BATCH)
    for out in result.values:
        assert out["world"] == 2 and out["distributed"] == "MULTI_CPU"
        assert out["steps"] == steps
        assert len(out["seen"]) == SAMPLES // 2
        assert out["callbacks"].count("NotebookCallback") == 1 + explicit_callback
        # a forked worker cannot show the notebook display: the logs are printed instead
        assert "PrinterCallback" in out["callbacks"]
        assert "NotebookProgressCallback" not in out["callbacks"]
    assert sorted(result[0]["seen"] + result[1]["seen"]) == list(range(SAMPLES))
    model = result.panel.model
    assert {"loss", "grad_norm", "learning_rate"} <= set(model.metrics)
    assert not {"epoch", "train_runtime", "total_flos"} & set(model.metrics)
    for rank in (0, 1):
        # logged every 2 steps, once each however many callbacks the Trainer holds
        assert [x for x, _ in points(model, "loss", rank)] == [2, 4, 6, 8]
        assert model.ranks[rank].status == "done"
    assert (model.ranks[0].done, model.ranks[0].total, model.ranks[0].desc) == (
        steps,
        steps,
        "train",
    )
    assert model.counts() == {"finished": 2}


def test_switched_off_the_trainer_gets_no_callback(tmp_path, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_INTEGRATIONS", "lightning,accelerate")
    result = notebook_launcher(
        train_with_trainer, (str(tmp_path), False), num_processes=2, output="none"
    )
    assert "NotebookCallback" not in result[0]["callbacks"]
    assert result[0]["world"] == 2  # joining the job does not depend on the switch
    assert result.panel.model.metrics == {}


# -- Accelerate's own Accelerator ----------------------------------------------------------------


def train_with_accelerate() -> dict:
    import accelerate

    accelerator = accelerate.Accelerator()  # defaults: no cpu=True
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.arange(SAMPLES), torch.randn(SAMPLES, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.init_trackers("real-accelerate")
    seen = []
    for step, (index, x) in enumerate(loader):
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        seen += index.tolist()
        accelerator.log({"loss": loss.item(), "note": "text is left out"}, step=step)
    accelerator.end_training()
    return {
        "world": accelerator.num_processes,
        "distributed": accelerator.distributed_type.value,
        "seen": seen,
        "trackers": [t.name for t in accelerator.trackers],
    }


@pytest.fixture
def accelerate_state_in_the_kernel():
    """Accelerate's state created in the launching process, as a notebook cell may have done."""
    import accelerate
    from accelerate.state import AcceleratorState

    accelerate.Accelerator(cpu=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("kernel_state", [False, True], ids=["fresh", "state-in-the-kernel"])
def test_accelerate_accelerator_with_defaults_joins_the_job_and_logs_to_the_panels(
    kernel_state, request
):
    if kernel_state:
        request.getfixturevalue("accelerate_state_in_the_kernel")
    result = notebook_launcher(train_with_accelerate, num_processes=2, output="none")
    for out in result.values:
        assert out["world"] == 2 and out["distributed"] == "MULTI_CPU"
        assert len(out["seen"]) == SAMPLES // 2
    assert result[0]["trackers"] == ["notebook"]  # added by the launcher to log_with
    assert result[1]["trackers"] == []  # Accelerate starts trackers on the main process only
    assert sorted(result[0]["seen"] + result[1]["seen"]) == list(range(SAMPLES))
    model = result.panel.model
    assert set(model.metrics) == {"loss"}
    steps = SAMPLES // (2 * BATCH)
    assert [x for x, _ in points(model, "loss", 0)] == list(range(steps))
    assert points(model, "loss", 1) == []  # Accelerate logs on the main process only


# -- Lightning Fabric --------------------------------------------------------------------------------


def train_with_fabric() -> dict:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()  # the launcher's processes are the job: nothing is started here
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    data = torch.utils.data.TensorDataset(torch.arange(SAMPLES), torch.randn(SAMPLES, 4))
    loader = fabric.setup_dataloaders(
        torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    )
    seen = []
    for step, (index, x) in enumerate(loader):
        loss = model(x).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        seen += index.tolist()
        fabric.log_dict({"loss": loss, "lr": 0.05}, step=step)
    total = fabric.all_reduce(torch.tensor(len(seen)), reduce_op="sum")
    return {
        "world": fabric.world_size,
        "rank": fabric.global_rank,
        "seen": seen,
        "total": int(total),
        "loggers": [type(logger).__name__ for logger in fabric.loggers],
    }


@pytest.mark.parametrize("kernel", [False, True], ids=["script", "from-a-kernel"])
def test_lightning_fabric_joins_the_launched_processes_and_logs_to_the_panels(kernel, monkeypatch):
    if kernel:  # as in a Jupyter kernel, where Lightning was imported interactively
        import lightning.fabric.connector as connector
        import lightning.fabric.utilities.imports as imports

        monkeypatch.setattr(sys, "ps1", "In : ", raising=False)
        monkeypatch.setattr(connector, "_IS_INTERACTIVE", True)
        monkeypatch.setattr(imports, "_IS_INTERACTIVE", True)
    result = notebook_launcher(train_with_fabric, num_processes=2, output="none")
    for rank, out in enumerate(result.values):
        assert (out["world"], out["rank"], out["total"]) == (2, rank, SAMPLES)
        assert len(out["seen"]) == SAMPLES // 2
        assert out["loggers"] == ["NotebookLogger"]
    assert sorted(result[0]["seen"] + result[1]["seen"]) == list(range(SAMPLES))
    model = result.panel.model
    steps = SAMPLES // (2 * BATCH)
    assert set(model.metrics) == {"loss", "lr"}
    for rank in (0, 1):  # Fabric logs on every rank
        assert [x for x, _ in points(model, "loss", rank)] == list(range(steps))


# -- plain DistributedDataParallel -------------------------------------------------------------------


def train_with_ddp() -> dict:
    import torch.distributed as dist

    from notebook_launcher import log, progress

    dist.init_process_group("gloo")  # env:// from the variables the launcher sets
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.arange(SAMPLES), torch.randn(SAMPLES, 4))
    sampler = torch.utils.data.distributed.DistributedSampler(data, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)
    seen = []
    for step, (index, x) in enumerate(progress(loader, desc="ddp")):
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seen += index.tolist()
        log({"loss": loss}, step=step)
    weights = [p.detach().clone() for p in model.parameters()]
    gathered = [None] * world
    dist.all_gather_object(gathered, weights)
    return {
        "world": world,
        "rank": rank,
        "seen": seen,
        "same": all(
            all(torch.equal(a, b) for a, b in zip(w, weights, strict=True)) for w in gathered
        ),
    }


def test_plain_ddp_is_one_job_with_its_metrics_in_the_panels():
    result = notebook_launcher(train_with_ddp, num_processes=2, output="none")
    for rank, out in enumerate(result.values):
        assert (out["world"], out["rank"]) == (2, rank) and out["same"]
        assert len(out["seen"]) == SAMPLES // 2
    assert sorted(result[0]["seen"] + result[1]["seen"]) == list(range(SAMPLES))
    model = result.panel.model
    steps = SAMPLES // (2 * BATCH)
    for rank in (0, 1):
        assert [x for x, _ in points(model, "loss", rank)] == list(range(steps))
    assert (model.ranks[0].done, model.ranks[0].total) == (steps, steps)


def train_and_destroy_the_group() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()  # as DDP tutorials and accelerator.end_training() do
    from notebook_launcher.integrations import teardown

    # The model is freed on return, with its reference to the group.
    return dist.is_initialized(), teardown._ddp_built  # built a DDP model: destroying waited


def test_destroying_the_group_right_after_a_backward_pass_does_not_hang():
    # Without the worker's pause in destroy_process_group about one launch in four hangs here:
    # the group's destructor waits, holding the GIL, for a gloo thread that needs the GIL.
    for _ in range(8):
        result = notebook_launcher(
            train_and_destroy_the_group, num_processes=2, output="none", ui="none", timeout=30
        )
        assert result.values == [(False, True), (False, True)]
