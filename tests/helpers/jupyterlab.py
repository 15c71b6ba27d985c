"""JupyterLab and headless Chromium for browser tests, each started and always stopped.

Chromium comes from the system package (``/usr/bin/chromium``), driven through Playwright's
Python API; JupyterLab runs on 127.0.0.1 with a token in a temporary root directory. Every wait
is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_TIMEOUT = 60.0


def missing() -> str | None:
    """Why browser tests cannot run here, or None."""
    for module in ("jupyterlab", "playwright"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[browser]')"
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Lab:
    """A running JupyterLab server: ``url(path)`` gives an address with the token."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.port = free_port()
        self.token = os.urandom(12).hex()
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(home / "config"),
            JUPYTER_RUNTIME_DIR=str(home / "runtime"),
            IPYTHONDIR=str(home / "ipython"),
            PYTHONUNBUFFERED="1",
        )
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={home / 'settings'}",
            f"--LabApp.workspaces_dir={home / 'workspaces'}",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI runners
            command.append("--allow-root")
        self.log = open(home / "jupyterlab.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def url(self, path: str, query: str = "") -> str:
        extra = f"&{query}" if query else ""
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}?token={self.token}{extra}"

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"JupyterLab did not answer within {timeout} s")

    def stop(self) -> None:
        """Stop the server and everything it started (kernels, their workers)."""
        try:
            started = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            started = []
        try:
            os.killpg(self.process.pid, signal.SIGTERM)  # shuts its kernels down too
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.process.kill()
        self.process.wait(10)
        for proc in started:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(started, timeout=5)
        self.log.close()


@contextmanager
def jupyterlab(root: Path, home: Path):
    lab = Lab(root, home)
    try:
        lab.wait_ready()
        yield lab
    finally:
        lab.stop()


@contextmanager
def chromium(profile: Path):
    """A headless Chromium page in a fresh profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            user_data_dir=str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1200, "height": 900},
        )
        try:
            context.set_default_timeout(30_000)
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


STATES = """(i) => {
    const table = document.querySelectorAll('.nl-status')[i];
    if (!table) return null;
    return Array.from(table.querySelectorAll('tr[data-rank]')).map(row => row.dataset.state);
}"""
LOGGED = """(i) => {
    const chart = document.querySelectorAll('.nl-metrics')[i]?.querySelector('svg[data-metric="loss"]');
    return chart ? Number(chart.dataset.logged) : 0;
}"""
KERNEL = """() => {
    const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = widget && widget.sessionContext && widget.sessionContext.session
        && widget.sessionContext.session.kernel;
    return kernel ? kernel.status : null;
}"""


def notebook(cells: list[str]) -> dict:
    """A notebook of code cells, not yet run."""
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for source in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def poll(page, script: str, arg, until, timeout: float, every: float = 0.1) -> list:
    """Evaluate ``script`` until ``until(value)``; return every distinct value seen, in order."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(script, arg)
        if not seen or seen[-1] != value:
            seen.append(value)
        if until(value):
            return seen
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up after {timeout} s; values seen: {seen[-5:]}")
        time.sleep(every)


@contextmanager
def notebook_page(tmp_path: Path, cells: list[str], name: str = "panels.ipynb"):
    """JupyterLab with a notebook of ``cells`` open in Chromium, its kernel idle: (lab, page)."""
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    settings = home / "settings" / "@jupyterlab"
    for extension, setting, values in (
        # Render every cell, on screen or not, so the test can read all outputs.
        ("notebook-extension", "tracker", {"windowingMode": "none"}),
        # No news or update toasts over the screenshots.
        ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False}),
    ):
        (settings / extension).mkdir(parents=True)
        (settings / extension / f"{setting}.jupyterlab-settings").write_text(json.dumps(values))
    (root / name).write_text(json.dumps(notebook(cells)))
    with jupyterlab(root, home) as lab, chromium(tmp_path / "profile") as page:
        page.goto(lab.url(f"lab/tree/{name}", "reset"))
        poll(page, KERNEL, None, lambda status: status == "idle", timeout=60, every=0.25)
        yield lab, page


def shoot(locator, name: str, shots: Path) -> None:
    locator.screenshot(path=str(shots / name))
