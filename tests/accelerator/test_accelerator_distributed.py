"""The Accelerator in 2 real ranks started by notebook_launcher (gloo on CPU)."""

from __future__ import annotations

import random

import torch
from torch.utils.data import DataLoader, TensorDataset

from notebook_launcher import DataLoaderConfiguration, notebook_launcher, set_seed
from notebook_launcher.accelerator import Accelerator


def _data(n=32):
    g = torch.Generator().manual_seed(7)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randn(n, 1, generator=g))


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def _reference(batch_size):
    """Plain single-process training on the global batch."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(_data(), batch_size=batch_size):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return _weights(model)


def ddp_training(accumulation):
    accelerator = Accelerator(gradient_accumulation_steps=accumulation)
    model = _model()
    optimizer = CountingSGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    loader = DataLoader(_data(), batch_size=4)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    syncs = []
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            syncs.append(accelerator.sync_gradients)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return {
        "weights": _weights(accelerator.unwrap_model(model)),
        "ddp": type(model).__name__,
        "optimizer_steps": optimizer.optimizer.steps,
        "scheduler_steps": scheduler.scheduler.last_epoch,
        "syncs": syncs,
    }


def test_ddp_matches_one_process_on_the_global_batch_and_steps_only_on_sync_steps():
    for accumulation in (1, 2):
        results = notebook_launcher(ddp_training, args=(accumulation,), num_processes=2)
        # 2 ranks x batch 4 x accumulation = the global batch of one optimizer step.
        expected = _reference(8 * accumulation)
        for result in results:
            assert result["ddp"] == "DistributedDataParallel"
            for got, want in zip(result["weights"], expected, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            assert result["syncs"] == [i % accumulation == accumulation - 1 for i in range(4)]
            assert result["optimizer_steps"] == 4 // accumulation
            # As in Accelerate: one scheduler step per process for each optimizer step.
            assert result["scheduler_steps"] == 2 * (4 // accumulation)
        assert results[0]["weights"][0].equal(results[1]["weights"][0])


def resumable_run(directory, stop_at):
    """Train 2 epochs (fp16, dropout, shuffling, accumulation); save or resume at ``stop_at``,
    with stateful loaders (the loader's position is saved)."""
    set_seed(11)
    accelerator = Accelerator(
        mixed_precision="fp16",
        gradient_accumulation_steps=2,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    loader = DataLoader(_data(40), batch_size=3, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    resuming = stop_at is None
    if resuming:
        accelerator.load_state(directory)
    step = 0
    for _ in range(loader.iteration, 2):  # a resumed loader knows its epoch
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            step += 1
            if step == stop_at:
                accelerator.save_state(directory)
    return {
        "weights": _weights(accelerator.unwrap_model(model)),
        "optimizer": optimizer.state_dict()["state"][0]["exp_avg"].clone(),
        "lr": scheduler.get_last_lr(),
        "scale": accelerator.scaler.get_scale(),
        "epoch": loader.iteration,
        "draws": (torch.rand(3), random.random()),
    }


def test_save_state_and_load_state_resume_bit_identically(tmp_path):
    # 7 batches per rank and epoch: 3 and 10 stop mid accumulation window (in epochs 0 and 1),
    # 9 at its end.
    for stop_at in (3, 9, 10):
        directory = str(tmp_path / f"ckpt{stop_at}")
        whole = notebook_launcher(resumable_run, args=(directory, stop_at), num_processes=2)
        resumed = notebook_launcher(resumable_run, args=(directory, None), num_processes=2)
        for a, b in zip(whole, resumed, strict=True):
            for got, want in zip(b["weights"], a["weights"], strict=True):
                assert torch.equal(got, want)
            assert torch.equal(b["optimizer"], a["optimizer"])
            assert b["lr"] == a["lr"] and b["scale"] == a["scale"] and b["epoch"] == a["epoch"]
            assert torch.equal(b["draws"][0], a["draws"][0]) and b["draws"][1] == a["draws"][1]


def metrics_and_errors():
    accelerator = Accelerator(mixed_precision="bf16")
    data = TensorDataset(torch.arange(13))
    loader = accelerator.prepare(DataLoader(data, batch_size=2))
    seen, objects = [], []
    for (batch,) in loader:
        seen.append(accelerator.gather_for_metrics(batch))
        objects.extend(accelerator.gather_for_metrics(batch.tolist()))
    skipped = [
        accelerator.gather_for_metrics(b) for (b,) in accelerator.skip_first_batches(loader, 1)
    ]
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    x = torch.randn(2, 4)
    inner = {}

    def record(module, args, out):
        inner["dtype"] = out.dtype  # the dtype inside the model's forward

    accelerator.unwrap_model(model)[0].register_forward_hook(record)
    with accelerator.autocast():
        inside = (x @ x.T).dtype
    errors = []
    wrapped = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    try:
        accelerator.prepare(wrapped)
    except ValueError as exc:
        errors.append(str(exc))
    return {
        "seen": torch.cat(seen).tolist(),
        "objects": objects,
        "skipped": torch.cat(skipped).tolist(),
        "dtypes": (inside, (x @ x.T).dtype, model(x).dtype, inner["dtype"]),
        "errors": errors,
    }


def test_gather_for_metrics_counts_each_sample_once_and_bf16_autocast():
    for result in notebook_launcher(metrics_and_errors, num_processes=2):
        assert sorted(result["seen"]) == list(range(13))
        assert sorted(result["objects"]) == list(range(13))
        assert sorted(result["skipped"]) == list(range(4, 13))
        assert result["dtypes"] == (torch.bfloat16, torch.float32, torch.float32, torch.bfloat16)
        assert len(result["errors"]) == 1 and "already wrapped" in result["errors"][0]


def tracked():
    accelerator = Accelerator(log_with="notebook")
    accelerator.init_trackers("demo", config={"lr": 0.1})
    for step in range(3):
        accelerator.log(
            {"loss": float(step + accelerator.process_index), "note": "text"}, step=step
        )
    accelerator.end_training()


def test_the_notebook_tracker_reaches_the_kernel_per_rank():
    model = notebook_launcher(tracked, num_processes=2, ui="none").panel.model
    loss = model.metrics["loss"]
    assert loss.logged == 6 and "note" not in model.metrics
    assert [loss.per_rank[rank].points() for rank in (0, 1)] == [
        [(0, 0.0), (1, 1.0), (2, 2.0)],
        [(0, 1.0), (1, 2.0), (2, 3.0)],
    ]
