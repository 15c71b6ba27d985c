"""``./dev lab``: installs what the tutorials need, starts JupyterLab on notebooks/ at 127.0.0.1,
prints a URL that opens it, and leaves nothing listening once stopped.

The environment ``./dev`` installs into is a fresh one layered over this interpreter's packages
(a ``.pth`` line): the install runs for real, offline, and touches no environment but its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

pytest.importorskip("jupyterlab")

ROOT = Path(__file__).resolve().parent.parent
BOUND = 240.0  # seconds: an install and a server start on a busy machine
URL = re.compile(r"^== JupyterLab on the tutorials: (http://127\.0\.0\.1:(\d+)/lab\?token=(\w+))$")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def layered_venv(folder: Path) -> Path:
    """A virtual environment that sees this interpreter's packages and holds none of its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    purelib = sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)})
    (Path(purelib) / "layer.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return folder


class Lab:
    """``./dev lab PORT`` running in a session of its own; its output read in the background."""

    def __init__(self, venv: Path, port: int) -> None:
        env = {
            **os.environ,
            "NOTEBOOK_LAUNCHER_VENV": str(venv),
            "PIP_NO_INDEX": "1",  # offline: every requirement is already installed here
            "PIP_NO_BUILD_ISOLATION": "0",  # so the package builds with this setuptools
        }
        env.pop("PYTHON", None)
        self.process = subprocess.Popen(
            [str(ROOT / "dev"), "lab", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def url(self) -> re.Match:
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            for line in self.lines:
                if match := URL.match(line):
                    return match
            assert self.process.poll() is None, "\n".join(self.lines)
            time.sleep(0.1)
        raise AssertionError("no URL printed:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        """SIGTERM (Jupyter shuts down cleanly on it), then wait; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        finally:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # whatever is left of its session
            except OSError:
                pass
            self.reader.join(10)
            self.process.stdout.close()


def get(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def answering(url: str, token: str, lab: Lab):
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        assert lab.process.poll() is None, "\n".join(lab.lines)
        try:
            return get(url, token)
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the server never answered:\n" + "\n".join(lab.lines))


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(600)
def test_dev_lab_serves_the_tutorials_on_loopback_and_stops_cleanly(tmp_path):
    venv = layered_venv(tmp_path / "venv")
    port = free_port()
    lab = Lab(venv, port)
    try:
        match = lab.url()
        assert int(match[2]) == port
        contents = answering(f"http://127.0.0.1:{port}/api/contents", match[3], lab)
        served = {item["name"] for item in contents["content"]}
        tutorials = {path.name for path in (ROOT / "notebooks").glob("*.ipynb")}
        assert tutorials and tutorials <= served
        specs = get(f"http://127.0.0.1:{port}/api/kernelspecs", match[3])
        assert "python3" in specs["kernelspecs"]
        server = psutil.Process(lab.process.pid)  # ./dev exec'd JupyterLab
        addresses = {
            c.laddr.ip for c in server.net_connections("inet") if c.status == psutil.CONN_LISTEN
        }
        assert addresses == {"127.0.0.1"}
        with pytest.raises(urllib.error.HTTPError):  # the token is needed
            get(f"http://127.0.0.1:{port}/api/contents", "wrong")
    finally:
        code = lab.stop()
    assert code == 0, "\n".join(lab.lines)
    assert not listening(port)
    assert any(line.startswith("== installing") for line in lab.lines)

    again = Lab(venv, free_port())  # the install is not repeated
    try:
        again.url()
    finally:
        again.stop()
    assert not any(line.startswith("== installing") for line in again.lines), again.lines
