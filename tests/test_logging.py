"""The "notebook_launcher" logger: silent by default, and says when a launch restarts, falls back
to a free port or tears its workers down."""

from __future__ import annotations

import logging
import os
import socket
import time

from notebook_launcher import notebook_launcher as launch

LOGGER = "notebook_launcher"


def fails_on_first_attempt():
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        if os.environ["RANK"] == "1":
            raise RuntimeError("first attempt fails")
        time.sleep(60)  # rank 0 is still busy when rank 1 fails, so it is stopped
    return int(os.environ["RANK"])


def rank():
    return int(os.environ["RANK"])


def test_the_logger_is_silent_unless_configured():
    handlers = logging.getLogger(LOGGER).handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_a_restart_and_the_teardown_it_needs_are_logged(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    result = launch(fails_on_first_attempt, num_processes=2, max_restarts=1, ui="none")
    assert result.values == [0, 1] and result.restarts == 1
    messages = [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)]
    restart = [m for m in messages if m.startswith("restarting all 2 processes (restart 1 of 1)")]
    assert restart and "first attempt fails" in restart[0]
    assert "stopping rank 0 (rank 1 failed)" in messages  # rank 0 was still running
    assert any(m.startswith("teardown: all 2 processes gone") for m in messages)


def test_a_taken_port_is_logged_with_the_port_used_instead(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        launch(rank, num_processes=2, use_port=port, ui="none")
    fallback = [
        r.getMessage()
        for r in caplog.records
        if r.name == "notebook_launcher.launch.rendezvous.store"
    ]
    assert fallback and fallback[0].startswith(f"port {port} on 127.0.0.1 is taken")
