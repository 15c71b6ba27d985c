"""Code users bring, launched from a real kernel: rich output, Lightning's Trainer and Fabric's
notebook strategies, tqdm bars under spawn. Every line arrives labelled once, and the panels fill.
"""

from __future__ import annotations

import re

import pytest
from helpers.kernelrun import strip_ansi
from helpers.ranklabels import LABEL, label_ranks, printed_by, text_of, uncoloured

pytestmark = pytest.mark.kernel


def lines_of(cell, name: str) -> list[str]:
    return cell.stream(name).splitlines()


def assert_labelled_once(lines: list[str]) -> None:
    """Every line starts with our label, and no library added its own rank label after it."""
    for line in map(uncoloured, lines):
        assert LABEL.match(line), f"unlabelled line: {line!r}"
        rest = line[LABEL.match(line).end() :]
        assert not re.match(r"\[rank:? ?\d+\]", rest), f"label twice: {line!r}"


RICH_KERNEL = r"""
import logging
import rich
from rich.logging import RichHandler

# Set up in the notebook before the launch: a handler and rich's console made in the kernel,
# where rich shows things as notebook displays.
logging.basicConfig(level=logging.INFO, format="%(message)s", force=True,
                    handlers=[RichHandler(show_time=False, show_path=False)])
logging.getLogger("notebook_launcher").setLevel(logging.WARNING)
rich.print("[bold]ready[/bold]")
"""

RICH_LAUNCH = r"""
import os, sys, time
from notebook_launcher import notebook_launcher

def with_rich():
    import rich.progress
    import torch.distributed as dist
    from lightning.fabric.utilities.rank_zero import rank_prefixed_message

    rank = int(os.environ["RANK"])
    rich.print(f"[bold red]hello[/bold red] from rank {rank}")
    logging.getLogger("train").warning("warned by rank %d", rank)
    with rich.progress.Progress() as bar:
        task = bar.add_task("[green]rich bar", total=5)
        for _ in range(5):
            time.sleep(0.01)
            bar.update(task, advance=1)
    print(rank_prefixed_message(f"prefixed by Lightning on rank {rank}", rank))
    dist.init_process_group("gloo")  # torch's excepthook labels what it prints from now on
    try:
        raise ValueError(f"printed by the excepthook of rank {rank}")
    except ValueError:
        sys.excepthook(*sys.exc_info())
    dist.barrier()
    return rank

result = notebook_launcher(with_rich, num_processes=2)
model = result.panel.model
print("progress", model.ranks[0].done, model.ranks[0].total, model.ranks[0].desc)
"""


def test_rich_output_from_two_ranks_arrives_as_plain_lines_labelled_once(kernel):
    kernel.execute(RICH_KERNEL, timeout=60)
    cell = kernel.execute(RICH_LAUNCH, timeout=60)

    assert cell.error() is None, cell.output()
    out = lines_of(cell, "stdout")
    assert cell.stream("stderr") == ""  # one output area: stderr lines are in stdout
    assert out[-1] == "progress 5 5 rich bar"  # the rich bar filled rank 0's progress column
    shown = out[:-1]
    assert_labelled_once(shown)
    # No colours or cursor movements meant for a terminal (only the launcher's red of problems)
    assert "\x1b" not in uncoloured(cell.stream())
    for rank in (0, 1):
        assert out.count(f"[rank{rank}] hello from rank {rank}") == 1, out
        assert f"[rank{rank}] prefixed by Lightning on rank {rank}" in out
        (warned,) = [x for x in out if f"warned by rank {rank}" in x]  # rich's console: stdout
        assert warned.startswith(f"[rank{rank}] WARNING"), warned
        (bar,) = [x for x in out if "rich bar" in x and rank in label_ranks(x)]
        assert "100%" in bar, bar
        assert printed_by(out, rank, "Traceback (most recent call last):"), out
        error = f"ValueError: printed by the excepthook of rank {rank}"
        assert printed_by(out, rank, error), out


LIGHTNING_IMPORT = r"""
import lightning.pytorch  # imported in the kernel, as a notebook does before launching
"""

TRAINER = r"""
import torch
import lightning.pytorch as pl
from notebook_launcher import notebook_launcher

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, index):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def fit(strategy, bar):
    data = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)))
    callbacks = [pl.callbacks.TQDMProgressBar()] if bar == "tqdm" else []
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=2,
                         log_every_n_steps=1, logger=False, enable_checkpointing=False,
                         callbacks=callbacks)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
    return trainer.global_step, [type(logger).__name__ for logger in trainer.loggers]

result = notebook_launcher(fit, args=(STRATEGY, BAR), num_processes=2)
model = result.panel.model
print("values", result.values)
print("metrics", sorted(model.metrics))
print("points", [[x for x, _ in model.metrics["train_loss"].per_rank[r].points()] for r in (0, 1)])
print("progress", model.ranks[0].done, model.ranks[0].total, model.ranks[0].desc)
"""


@pytest.mark.parametrize(
    ("strategy", "bar"),
    [("ddp", "rich"), ("ddp_notebook", "tqdm")],
    ids=["ddp-rich", "notebook-tqdm"],
)
def test_lightning_trainer_shows_its_summary_and_progress_and_fills_the_metrics(
    kernel, strategy, bar
):
    kernel.execute(LIGHTNING_IMPORT, timeout=60)
    code = TRAINER.replace("STRATEGY", repr(strategy)).replace("BAR", repr(bar))
    cell = kernel.execute(code, timeout=90)

    assert cell.error() is None, cell.output()
    out, err = lines_of(cell, "stdout"), lines_of(cell, "stderr")
    results = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out[-4:]}
    assert results["values"] == "[(8, ['NotebookTrainerLogger']), (8, ['NotebookTrainerLogger'])]"
    assert results["metrics"] == "['train_loss']"  # self.log reached the panel, epoch left out
    steps = list(range(8))  # 4 batches a rank, 2 epochs, logged every step on every rank
    assert results["points"] == str([steps, steps])
    desc = "Epoch 1/1" if bar == "rich" else "Epoch 1"
    assert results["progress"] == f"4 4 {desc}", results["progress"]
    shown = [strip_ansi(line) for line in out[:-4] + err]
    assert_labelled_once(shown)
    text = "\n".join(shown)
    assert "[rank0] Total params" in text or re.search(r"\[rank0\] \d+\s+Total params", text), text
    assert re.search(r"\[rank0\] .*\bName\b.*\bType\b.*\bParams\b", text), text  # the summary
    assert "[rank0] Epoch 1" in text, text  # the progress bar's last state
    assert "spawn processes" not in text and "interactive" not in text


FABRIC = r"""
import torch
from lightning.fabric import Fabric
from notebook_launcher import notebook_launcher

def train(fabric):  # as written for Fabric in a notebook: launched by fabric.launch
    return fabric.global_rank, int(fabric.all_reduce(torch.tensor(1), reduce_op="sum"))

def run(strategy):
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy)
    return fabric.launch(train)

for strategy in ("ddp_notebook", "ddp_fork"):
    print(strategy, notebook_launcher(run, args=(strategy,), num_processes=2).values)
"""


def test_fabric_code_written_for_notebooks_joins_the_launched_processes(kernel):
    cell = kernel.execute(FABRIC, timeout=60)

    assert cell.error() is None, cell.output()
    # The cell's own lines (the workers' lines, Lightning's notices among them, are labelled).
    assert [line for line in lines_of(cell, "stdout") if not line.startswith("[rank")] == [
        "ddp_notebook [(0, 2), (1, 2)]",
        "ddp_fork [(0, 2), (1, 2)]",
    ], cell.output()


SPAWN_TQDM = r"""
import time
from tqdm.auto import tqdm  # in a kernel: tqdm's notebook bar, an ipywidget
from notebook_launcher import notebook_launcher

def bars():
    for _ in tqdm(range(30), desc="epoch 1"):
        time.sleep(0.01)
    return 0

result = notebook_launcher(bars, num_processes=2, start_method="spawn")
rank0 = result.panel.model.ranks[0]
print("progress", rank0.done, rank0.total, rank0.desc)
"""


def test_tqdm_auto_bars_under_spawn_fill_the_progress_column(kernel):
    cell = kernel.execute(SPAWN_TQDM, timeout=90)

    assert cell.error() is None, cell.output()
    assert lines_of(cell, "stdout")[-1] == "progress 30 30 epoch 1"
    out = lines_of(cell, "stdout")
    for rank in (0, 1):
        # Alone or grouped with the other rank: the bar's last state without its timings.
        (line,) = [
            x for x in out if rank in label_ranks(x) and text_of(x).startswith("epoch 1: 100%")
        ]
        assert "30/30" in line
