"""The panels in JupyterLab and in exported HTML, in headless Chromium: what a user sees while
runs go on, and what stays once the kernel is gone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.jupyterlab import KERNEL, STATES, notebook, notebook_page, poll, shoot

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

STALLS = """\
def stalls(steps):
    rank = int(os.environ["RANK"])
    for step in progress(range(steps), desc="epoch 1", rank_zero_only=False):
        log({"loss": 1.0 / (step + 1)}, step=step)
        if rank == 1 and step == 10:
            time.sleep(8)  # no output, no CPU, nothing logged: quiet
        time.sleep(0.04)
    return rank
"""
NOTICE = """(i) => {
    const table = document.querySelectorAll('.nl-status')[i];
    return table?.querySelector('tr[data-rank="1"] .nl-notice')?.textContent ?? null;
}"""

LOGGED = """(i) => {
    const chart = document.querySelectorAll('.nl-metrics')[i]?.querySelector('[data-metric="loss"]');
    return chart ? Number(chart.dataset.logged) : 0;
}"""


def run_all(page) -> None:
    # Not awaited: the command's promise resolves only once every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def test_panels_update_live_show_failures_and_the_buttons_launch_and_stop(tmp_path, shots):
    with notebook_page(tmp_path, CELLS) as (_, page):
        live_failed_and_config_panel(page, shots)


def test_a_quiet_rank_is_named_in_the_panel_and_the_cell_while_the_run_goes_on(tmp_path, shots):
    cells = [
        SETUP + STALLS,
        "notebook_launcher(stalls, args=(40,), num_processes=2, stall_notice=2)",
    ]
    with notebook_page(tmp_path, cells) as (_, page):
        run_all(page)
        poll(page, NOTICE, 0, lambda text: text and "no progress" in text, timeout=60)
        notice = page.evaluate(NOTICE, 0)
        # Its own quiet time: at least the 2 s the whole job was quiet for.
        assert re.match(r"no progress for [2-9] s — in stalls \(", notice), notice
        assert page.evaluate(STATES, 0)[1] == "running"  # named, not stopped
        output = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
        # The notice is a line of the cell's one output area, among the ranks' lines.
        notice_area = output.locator(
            '[data-mime-type="application/vnd.jupyter.stdout"]',
            has_text="no rank has made progress",
        )
        notice_area.first.wait_for(timeout=10_000)
        said = notice_area.first.inner_text()
        assert "no rank has made progress for 2 s" in said
        assert "rank 1 is where the job is stuck. Nothing was stopped (stall_timeout=900 s" in said
        assert "rank 1 was in stalls (" in said
        shoot(output, "stall-notice.png", shots)
        # Its next step is a sign of life: the notice goes and the run ends normally.
        poll(page, STATES, 0, lambda states: states == ["finished", "finished"], timeout=60)


def live_failed_and_config_panel(page, shots: Path) -> None:
    run_all(page)

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
    # The user's own stop is no error: said in grey, the rows not red.
    stopped = page.locator(".nl-run-stopped")
    assert stopped.inner_text().startswith("stopped after")
    assert stopped.evaluate("e => getComputedStyle(e).color") == "rgb(107, 114, 128)"
    assert page.locator(".nl-run-error").count() == 0
    panel = page.locator(".jp-Cell").nth(3).locator(".nl-panel")  # the run's static copy
    assert panel.locator(".nl-blamed, .nl-error").count() == 0
    poll(
        page,
        "() => document.querySelector('.jupyter-widgets button').disabled",
        None,
        lambda disabled: disabled is False,
        timeout=10,
    )


REOPENED = [
    SETUP,
    "result = notebook_launcher(train, args=(60,), num_processes=2)",
    "def quiet_failure():\n"
    "    if os.environ['RANK'] == '1':\n"
    "        raise ValueError('bad batch 17')\n"
    "    time.sleep(60)\n\n\n"
    "notebook_launcher(quiet_failure, num_processes=2)",
]
MODEL_NOT_FOUND = "Error displaying widget"


def chart_images_loaded(locator) -> list[int]:
    """The natural width of each chart image (0: not shown) of the panels in ``locator``."""
    return locator.locator("img.nl-chart").evaluate_all("images => images.map(i => i.naturalWidth)")


def test_a_saved_notebook_shows_its_final_panels_after_the_kernel_is_gone(tmp_path, shots):
    with notebook_page(tmp_path, REOPENED) as (lab, page):
        run_all(page)
        poll(
            page,
            "() => document.querySelectorAll('.nl-panel').length",
            None,
            lambda n: n == 2,
            timeout=120,
        )
        poll(page, KERNEL, None, lambda status: status == "idle", timeout=60)
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        poll(page, "() => document.title.startsWith('panels.ipynb')", None, bool, timeout=30)
        poll(
            page,
            "() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
            None,
            bool,
            timeout=30,
        )
        saved = json.loads((lab.root / "panels.ipynb").read_text())
        for session in json.load(urllib.request.urlopen(lab.url("api/sessions"))):
            request = urllib.request.Request(
                lab.url(f"api/sessions/{session['id']}"), method="DELETE"
            )
            urllib.request.urlopen(request).close()  # shuts the kernel down

        page.goto(lab.url("lab/tree/panels.ipynb", "reset"))  # a fresh page: no widget models
        cells = page.locator(".jp-Cell")
        cells.nth(2).locator(".nl-panel").wait_for(timeout=60_000)
        done, failed = (cells.nth(i).locator(".jp-OutputArea") for i in (1, 2))
        table = done.locator(".nl-status").inner_text()
        assert "2 ranks · 2 finished" in table and "epoch 1 60/60" in table
        assert chart_images_loaded(done) == [340, 340]  # accuracy and loss
        assert MODEL_NOT_FOUND not in page.locator(".jp-Notebook").inner_text()
        # A run that logged nothing keeps one line, the rank to blame marked, then the error:
        # the rank's report and traceback, without the launcher's frames.
        line = failed.locator(".nl-compact")
        assert "2 ranks · 1 failed, 1 stopped" in line.inner_text()
        assert "rank 1: ValueError: bad batch 17" in line.locator(".nl-error").inner_text()
        badges = line.locator(".nl-rank").evaluate_all("b => b.map(e => e.dataset.state)")
        assert badges == ["stopped", "failed"]
        error = failed.locator('[data-mime-type="application/vnd.jupyter.stderr"]').inner_text()
        assert error.startswith("ValueError: bad batch 17\nrank 1 (local rank 1, pid ")
        assert "raise ValueError('bad batch 17')" in error
        assert "notebook_launcher/" not in error and "Raised where the launch was called" in error
        shoot(cells.nth(1), "reopened.png", shots)
        shoot(failed, "error.png", shots)
    # What was saved: per launch the static copy, nothing else (a launch that lasted long enough
    # to show its widgets leaves their emptied output before it).
    kept = [
        output["data"]
        for cell in saved["cells"]
        for output in cell["outputs"]
        if output["output_type"] == "display_data"
    ]
    assert [sorted(data) for data in kept if data] == [["text/html", "text/plain"]] * 2
    assert kept[0] == {}  # the training run showed live widgets


EXPORTED = [
    SETUP,
    "result = notebook_launcher(train, args=(40,), num_processes=2)",
    "try:\n    notebook_launcher(fails, args=(40,), num_processes=2)\n"
    "except ValueError as error:\n    print('caught:', error)",
    "def hello():\n    print('hello from rank', os.environ['RANK'])\n\n\n"
    "notebook_launcher(hello, num_processes=2).values",
]


def test_an_exported_notebook_shows_its_final_panels_offline(tmp_path, shots):
    source = tmp_path / "exported.ipynb"
    source.write_text(json.dumps(notebook(EXPORTED)))
    kernels = tmp_path / "jupyter" / "kernels" / "python3"  # this Python, whatever is installed
    kernels.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "Python 3", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec))
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "jupyter")}
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute"]
    subprocess.run([*command, str(source)], env=env, check=True, timeout=300)
    page_file = tmp_path / "exported.html"

    from helpers.jupyterlab import chromium

    with chromium(tmp_path / "profile") as page:
        page.set_viewport_size({"width": 900, "height": 900})
        asked = []

        def offline(route):
            asked.append(route.request.url)
            route.abort()

        page.route(lambda url: not url.startswith(("file:", "data:")), offline)
        page.goto(page_file.as_uri())
        outputs = page.locator(".jp-Cell").nth(1).locator(".jp-Cell-outputWrapper")
        table = outputs.locator(".nl-status").inner_text()
        assert "2 ranks · 2 finished" in table and "epoch 1 40/40" in table
        assert chart_images_loaded(outputs) == [340, 340]
        failed = page.locator(".jp-Cell").nth(2).locator(".jp-Cell-outputWrapper")
        assert "ValueError: bad batch at step 20" in failed.locator(".nl-error").first.inner_text()
        assert "caught: bad batch at step 20" in failed.inner_text()
        quiet = page.locator(".jp-Cell").nth(3).locator(".nl-compact")  # logged nothing: a line
        assert "2 ranks · 2 finished" in quiet.inner_text()
        assert quiet.locator(".nl-rank").count() == 2
        shoot(page.locator(".jp-Cell").nth(1), "exported.png", shots)
        assert all(not url.startswith("file:") for url in asked)  # only the web was refused


RUN_BELOW = """(index) => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = index;
    window.jupyterapp.commands.execute('notebook:run-all-below');
}"""
SESSION_CELLS = [
    "%load_ext notebook_launcher",
    "%%distributed -n 2\n"
    "import time, torch\n"
    "from notebook_launcher import PartialState\n"
    "rank = PartialState().process_index\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))",
    "%%distributed\n"
    "loss = model(torch.randn(4, 8)).sum()\n"
    "if rank == 1:\n"
    "    time.sleep(0.3)  # rank 0 waits in the gradients' all-reduce meanwhile\n"
    "    raise ValueError('batch 7 has the wrong shape')\n"
    "loss.backward()",
    "%%distributed\nmodel(torch.randn(4, 8)).sum().backward()\nrank",
    "%distributed close",
]


@pytest.mark.timeout(300)
def test_a_failing_session_cell_shows_a_short_error_and_the_session_goes_on(tmp_path, shots):
    with notebook_page(tmp_path, SESSION_CELLS, name="session.ipynb") as (_, page):
        run_all(page)  # runs up to the failing cell
        cells = page.locator(".jp-Cell")
        failed = cells.nth(2).locator(".jp-OutputArea")
        stderr = failed.locator('[data-mime-type="application/vnd.jupyter.stderr"]')
        stderr.last.wait_for(timeout=120_000)
        page.evaluate(RUN_BELOW, 3)
        cells.nth(3).locator(".jp-OutputArea-output").last.wait_for(timeout=120_000)
        error = stderr.last.inner_text()
        lines = error.strip().splitlines()
        # The headline once; the rank's traceback in this cell; what was stopped; what is left.
        assert lines[0] == "ValueError: batch 7 has the wrong shape", error
        assert error.count("batch 7 has the wrong shape") == 2, error  # headline, source line
        assert lines[1].startswith("Raised on rank 1 (pid "), error
        assert re.fullmatch(r"  Cell In\[\d+\], line 5, in <module>", lines[2]), error
        assert "The call was stopped on rank 0." in lines, error
        assert lines[-1].startswith("The session is still usable"), error
        assert "1 DistributedDataParallel model moved onto it" in lines[-1], error
        assert "get_ipython" not in error and "notebook_launcher/" not in error, error
        shoot(failed, "session-error.png", shots)
        # The same model trains on in the next cell.
        assert "[0, 1]" in cells.nth(3).locator(".jp-OutputArea").inner_text()
