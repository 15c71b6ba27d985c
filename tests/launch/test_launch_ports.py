"""The rendezvous port: a taken port does not stop a launch, and nothing stays listening."""

from __future__ import annotations

import os
import socket
import time

import psutil
import pytest

from notebook_launcher import LaunchTimeoutError, PartialState
from notebook_launcher import notebook_launcher as launch


def listening_ports() -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def master_port_and_kernel_listening():
    """The port the workers were given, and whether the launching process listens on it."""
    port = int(os.environ["MASTER_PORT"])
    kernel = psutil.Process(os.getppid())
    listening = {
        c.laddr.port for c in kernel.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN
    }
    PartialState().wait_for_everyone()  # the rendezvous through that port really works
    return port, port in listening


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_taken_port_falls_back_to_a_free_one(host):
    with socket.socket() as taken:
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = launch(master_port_and_kernel_listening, num_processes=2, use_port=str(port))

    used = {value[0] for value in result}
    assert len(used) == 1
    (master_port,) = used
    assert master_port != port
    assert all(listening for _, listening in result)
    assert master_port not in listening_ports()


def test_free_requested_port_is_used_and_released():
    port = free_port()

    result = launch(master_port_and_kernel_listening, num_processes=2, use_port=port)

    assert result.values == [(port, True), (port, True)]
    assert port not in listening_ports()


def fail_on_rank_1():
    if os.environ["RANK"] == "1":
        raise RuntimeError("fails")
    PartialState().wait_for_everyone()


def block_forever():
    PartialState()
    time.sleep(3600)


@pytest.mark.parametrize(
    ("function", "kwargs", "error"),
    [
        (fail_on_rank_1, {}, RuntimeError),
        (block_forever, {"timeout": 1}, LaunchTimeoutError),
    ],
    ids=["failure", "timeout"],
)
def test_port_released_after_failed_launch(function, kwargs, error):
    port = free_port()
    before = listening_ports()

    with pytest.raises(error):
        launch(function, num_processes=2, use_port=port, **kwargs)

    assert port not in listening_ports()
    assert listening_ports() <= before
