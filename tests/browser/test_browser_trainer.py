"""A transformers Trainer launched from JupyterLab: its metrics fill the panels live, with no
call of ours in the training code (the launcher adds the callback in the workers)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from helpers.jupyterlab import LOGGED, STATES, notebook_page, poll, shoot

pytestmark = pytest.mark.browser

TRAIN = """\
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from notebook_launcher import notebook_launcher


def train_classifier(output_dir, samples=2048, epochs=3):
    config = BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=16, num_labels=2,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (samples, 8), generator=g)
    labels = (ids[:, 0] >= 32).long()
    data = [{"input_ids": i, "labels": l} for i, l in zip(ids, labels)]
    args = TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=16, num_train_epochs=epochs,
        learning_rate=1e-3, logging_steps=2, report_to="none", save_strategy="no", seed=0,
    )
    return Trainer(model=model, args=args, train_dataset=data).train().global_step
"""
LAUNCH = (
    "result = notebook_launcher(train_classifier, args=(tempfile.mkdtemp(),), num_processes=2,"
    ' output="main")'
)
STEPS = 2048 // 32 * 3  # optimizer steps: 2 ranks of 16 samples, 3 epochs
PROGRESS = """() => {
    const row = document.querySelector('.nl-status tr[data-rank="0"]');
    return row ? row.innerText : null;
}"""


def test_trainer_metrics_and_progress_show_live(tmp_path):
    shots = tmp_path / "shots"
    shots.mkdir()
    with notebook_page(tmp_path, [TRAIN, LAUNCH], "trainer.ipynb") as (_, page):
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        poll(page, STATES, 0, lambda s: s is not None, timeout=120)
        logged, shot = [], False
        while True:
            states = page.evaluate(STATES, 0)
            logged.append(page.evaluate(LOGGED, 0))
            if not shot and logged[-1] >= 100 and states == ["running", "running"]:
                panels = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea-child").first
                shoot(panels, "trainer.png", shots)  # the status table and charts only
                shot = True
            if states == ["finished", "finished"]:
                break
            assert len(logged) < 1200, f"the run did not finish; states {states}"
            time.sleep(0.1)
        assert len(set(logged)) >= 3, f"the loss chart did not grow live: {sorted(set(logged))}"
        assert shot, "never saw both ranks running with a loss chart"
        # The run's end replaces the live widgets with the kept static panel: read that.
        row = poll(page, PROGRESS, None, lambda r: r and f"{STEPS}/{STEPS}" in r, timeout=20)[-1]
        assert "done" in row, row
        kept = page.locator(".jp-Cell").nth(1).locator(".nl-panel").first.inner_html()
        for metric in ("loss", "grad_norm", "learning_rate"):
            assert metric in kept, f"{metric} missing from the kept panel"
        output = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea").inner_text()
        assert "[rank0] {'loss'" in output  # the Trainer's own log lines, printed by rank 0

    target = os.environ.get("NOTEBOOK_LAUNCHER_SCREENSHOTS")
    if target:  # regenerate the picture in docs/
        shutil.copy(shots / "trainer.png", Path(target) / "trainer.png")
