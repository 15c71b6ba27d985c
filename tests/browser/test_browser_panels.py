"""The live panels in JupyterLab, in headless Chromium: what a user sees while runs go on."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from jupyterlab_helpers import KERNEL, LOGGED, STATES, notebook_page, poll, shoot

pytestmark = pytest.mark.browser

SETUP = """\
import os, time
from notebook_launcher import LaunchPanel, log, notebook_launcher, progress, set_status


def train(steps):
    rank = int(os.environ["RANK"])
    set_status("training")
    for step in progress(range(steps), desc="epoch 1"):
        log({"loss": 2.0 / (step + 1) + 0.05 * rank, "accuracy": 1 - 1 / (step + 2)}, step=step)
        if step % 25 == 0:
            print(f"step {step}: loss {2.0 / (step + 1):.3f}", flush=True)
        time.sleep(0.04)
    return rank


def fails(steps):
    rank = int(os.environ["RANK"])
    for step in progress(range(steps), desc="epoch 1", rank_zero_only=False):
        log({"loss": 1.0 / (step + 1)}, step=step)
        if rank == 1 and step == steps // 2:
            raise ValueError(f"bad batch at step {step}")
        time.sleep(0.04)
"""
CELLS = [
    SETUP,
    "result = notebook_launcher(train, args=(150,), num_processes=2)",
    "try:\n    notebook_launcher(fails, args=(60,), num_processes=2)\n"
    "except ValueError as error:\n    print('caught:', error)",
    "panel = LaunchPanel(train, args=(5000,), num_processes=2, max_processes=2)\npanel",
]


@pytest.fixture
def lab_page(tmp_path):
    with notebook_page(tmp_path, CELLS) as page:
        yield page


def test_panels_update_live_show_failures_and_the_buttons_launch_and_stop(lab_page, tmp_path):
    page = lab_page
    shots = tmp_path / "shots"
    shots.mkdir()
    # Not awaited: the command's promise resolves only once every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    # 1. A blocking launch: the rows go from running to finished, the chart grows as it runs.
    poll(page, STATES, 0, lambda s: s is not None, timeout=60)
    logged = []
    shot = False
    while True:
        states = page.evaluate(STATES, 0)
        logged.append(page.evaluate(LOGGED, 0))
        if not shot and logged[-1] > 150 and states == ["running", "running"]:
            shoot(page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea"), "live.png", shots)
            shot = True
        if states == ["finished", "finished"]:
            break
        assert len(logged) < 600, f"run did not finish; states {states}"
        time.sleep(0.1)
    growth = sorted(set(logged))
    assert len(growth) >= 4, f"the chart did not grow live: {growth}"
    assert logged[-1] == 300 or poll(page, LOGGED, 0, lambda n: n == 300, timeout=5)
    assert shot, "never saw both ranks running with a chart"

    # 2. A failing rank turns red with its error; the other rank is stopped.
    seen = poll(page, STATES, 1, lambda s: s == ["stopped", "failed"], timeout=60)
    assert ["running", "running"] in seen
    row = page.locator(".nl-status").nth(1).locator('tr[data-rank="1"]')
    assert "ValueError: bad batch at step 30" in row.locator(".nl-error").inner_text()
    colour = row.evaluate("row => getComputedStyle(row).backgroundColor")
    assert colour == "rgba(214, 39, 40, 0.14)"
    error_colour = row.locator(".nl-error").evaluate("e => getComputedStyle(e).color")
    assert error_colour == "rgb(214, 39, 40)"
    shoot(page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea"), "failure.png", shots)

    # 3. The config panel: Launch starts a run and leaves the kernel free; Stop stops it.
    launch = page.locator(".jupyter-widgets button", has_text="Launch")
    stop = page.locator(".jupyter-widgets button", has_text="Stop")
    launch.wait_for(state="visible", timeout=60_000)
    assert stop.is_disabled() and page.locator(".nl-plan").inner_text().count("gloo") == 1
    poll(page, KERNEL, None, lambda status: status == "idle", timeout=30)
    launch.click()
    poll(page, STATES, 2, lambda s: s == ["running", "running"], timeout=60)
    poll(page, LOGGED, 2, lambda n: n > 100, timeout=30)
    assert page.evaluate(KERNEL) == "idle"  # supervised from a thread: the kernel stays free
    assert launch.is_disabled() and not stop.is_disabled()
    shoot(page.locator(".jp-Cell").nth(3).locator(".jp-OutputArea"), "config-panel.png", shots)
    stop.click()
    poll(page, STATES, 2, lambda s: s == ["stopped", "stopped"], timeout=30)
    assert "LaunchStoppedError" in page.locator(".nl-run-error").inner_text()
    poll(
        page,
        "() => document.querySelector('.jupyter-widgets button').disabled",
        None,
        lambda disabled: disabled is False,
        timeout=10,
    )

    target = os.environ.get("NOTEBOOK_LAUNCHER_SCREENSHOTS")
    if target:  # regenerate the pictures in docs/
        for picture in shots.iterdir():
            shutil.copy(picture, Path(target) / picture.name)
