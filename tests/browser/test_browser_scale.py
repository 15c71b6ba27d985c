"""Eight and sixty-four ranks in JupyterLab: one readable cell, bars drawn as bars, the panel and
the result in view, a table of 64 ranks that fits the screen."""

from __future__ import annotations

import pytest
from helpers.jupyterlab import notebook_page, poll, shoot

from notebook_launcher.ui.folding import MAX_ROWS

pytestmark = pytest.mark.browser

SETUP = """\
import os, time
os.environ["NOTEBOOK_LAUNCHER_MAX_PROCESSES"] = "64"
from tqdm.auto import tqdm
from notebook_launcher import PartialState, log, notebook_launcher


def train(epochs):
    rank = int(os.environ["RANK"])
    state = PartialState()
    for epoch in range(epochs):
        for step in tqdm(range(25), desc=f"epoch {epoch}"):
            time.sleep(0.01 + 0.004 * rank)
            if step == 24:
                state.wait_for_everyone()
        loss = 1.0 / (epoch + 1) + rank / 100
        log({"loss": loss}, step=epoch)
        print(f"epoch {epoch}: loss {loss:.3f}")
    return rank


def light(steps):
    rank = int(os.environ["RANK"])
    for step in range(steps):
        log({"loss": 1.0 / (step + 1) + (rank % 8) / 40}, step=step)
        print(f"step {step} done", flush=True)
        time.sleep(0.2)
    return rank
"""
CELLS = [
    SETUP,
    "result = notebook_launcher(train, args=(6,), num_processes=8)\nresult",
    "many = notebook_launcher(light, args=(25,), num_processes=64, threads_per_process=1)",
]
MEAN_POINTS = """() => {
    const chart = document.querySelector('.nl-live svg[data-metric="loss"]');
    return chart ? Number(chart.dataset.points) : 0;
}"""
BOUNDED = """(i) => {
    const out = document.querySelectorAll('.jp-Cell')[i]
        .querySelector(".jp-RenderedText[data-mime-type='application/vnd.jupyter.stdout']");
    if (!out) return null;
    return {shown: out.clientHeight, all: out.scrollHeight, style: getComputedStyle(out).overflowY};
}"""


def test_eight_and_sixty_four_ranks_read_as_one_cell_each(tmp_path, shots):
    with notebook_page(tmp_path, CELLS, name="scale.ipynb") as (_, page):
        page.set_viewport_size({"width": 1280, "height": 1000})
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        eight = page.locator(".jp-Cell").nth(1)

        # While it runs the worker output keeps a height of its own, scrolled to its last line,
        # so the live table above it stays in view.
        sizes = poll(
            page, BOUNDED, 1, lambda s: s is not None and s["all"] > s["shown"] + 20, timeout=120
        )
        assert sizes[-1]["style"] == "auto", sizes
        assert eight.locator(".nl-live .nl-status").count() == 1
        eight.locator(".jp-OutputArea-executeResult").wait_for(timeout=120_000)

        # The end: no "Show more outputs", the final table, one bar per loop, the result.
        assert eight.locator(".jp-TrimmedOutputs").count() == 0
        assert "Show more outputs" not in eight.inner_text()
        assert eight.locator(".nl-panel .nl-bar").count() == 1  # the last loop's final state
        assert "25/25 on 8 ranks" in eight.locator(".nl-panel .nl-bar").inner_text()
        result = eight.locator(".jp-OutputArea-executeResult")
        assert "LaunchResult(8 processes" in result.inner_text()
        assert result.is_visible()
        text = eight.locator(".jp-RenderedText").first.inner_text()
        assert "[rank0-7] epoch 5: 100%|██████████| 25/25" in text and "it/s]" not in text
        shoot(eight.locator(".jp-OutputArea"), "eight-ranks.png", shots)

        # 64 ranks: the live table folds alike ranks into one row and opens to every rank.
        many = page.locator(".jp-Cell").nth(2)
        many.locator(".nl-live .nl-status tr.nl-row").first.wait_for(timeout=120_000)
        rows = many.locator(".nl-live .nl-status").first.locator("tr.nl-row")
        # Ranks that started late on a busy machine may be some steps behind: a row per step
        # they are at, never more than MAX_ROWS (one screen), never a row per rank.
        assert rows.count() <= MAX_ROWS, rows.all_inner_texts()
        panel = many.locator(".nl-live")
        poll(page, MEAN_POINTS, None, lambda n: n >= 8, timeout=60)
        box = panel.bounding_box()
        assert box is not None and box["height"] < 1000, box  # one screen
        shoot(panel, "sixty-four-ranks.png", shots)
        many.locator(".nl-panel").wait_for(timeout=120_000)
        final = many.locator(".nl-panel > .nl-status tr.nl-row")
        assert final.count() == 1 and final.first.inner_text().startswith("0-63")
        every = many.locator(".nl-panel details.nl-every-rank")
        every.locator("summary").click()
        assert every.locator("tr.nl-row").count() == 64
