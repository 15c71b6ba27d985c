"""The kernel's listener for ranks on other machines (launchers/remote): one thread accepts and
authenticates every connection, each within a deadline for the whole handshake, with a bound on
the connections waiting at once that a flood cannot use to keep a rank out, and running out of
open files is named as such."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from helpers.flood import open_connections

from notebook_launcher.launch.launchers.remote.links import Relay, close_writers, new_handle
from notebook_launcher.protocol import remote_link


class Owner:
    """What a launcher's attempt gives its handles (the lock its sends share)."""

    def __init__(self) -> None:
        self.send_lock = threading.Lock()

    def closed(self, handle) -> None:
        pass


def _relay(ranks: int = 1, **limits) -> tuple[Relay, list, bytes]:
    owner = Owner()
    handles = [new_handle(rank, rank, 0, "node 0 at 127.0.0.1", owner) for rank in range(ranks)]
    secret = remote_link.new_secret()
    return Relay("127.0.0.1", secret, 0, handles, **limits), handles, secret


def _release(relay: Relay, handles: list) -> None:
    relay.close()
    for handle in handles:
        close_writers(handle)
        handle.process.release()
        handle.close()


def _closed_by_peer(client: socket.socket, limit: float) -> float | None:
    """Seconds until the other end closed ``client`` (None: not within ``limit``)."""
    started = time.monotonic()
    client.settimeout(limit)
    try:
        while True:
            if client.recv(64) == b"":
                return time.monotonic() - started
    except ConnectionResetError:
        return time.monotonic() - started
    except TimeoutError:
        return None


def test_a_rank_joins_through_a_flood_of_connections_that_never_authenticate():
    relay, handles, secret = _relay()
    threads = threading.active_count()
    flood = open_connections(relay.address, 600)
    try:
        for _ in range(100):  # a second of the flood
            assert threading.active_count() <= threads, "a thread per connection"
            time.sleep(0.01)
        sock = remote_link.join_kernel(relay.address, secret, 0, 0)
        sock.close()
        assert relay.wait_joined(30), "the rank was kept out by the flood"
        assert relay.gate.most_pending <= relay.gate.max_pending
        assert threading.active_count() <= threads
    finally:
        for client in flood:
            client.close()
        _release(relay, handles)


def test_a_connection_that_trickles_its_handshake_is_cut_off_at_the_deadline():
    relay, handles, secret = _relay()
    idle = socket.create_connection(relay.address, timeout=10)
    trickler = socket.create_connection(relay.address, timeout=10)
    stop = threading.Event()

    def trickle():  # a byte every 0.5 s: 72 bytes would take 36 s
        try:
            while not stop.wait(0.5):
                trickler.send(b"x")
        except OSError:
            pass

    feeder = threading.Thread(target=trickle)
    feeder.start()
    try:
        limit = 15.0  # three times the deadline
        assert _closed_by_peer(trickler, limit) is not None
        assert _closed_by_peer(idle, limit) is not None
        assert relay.gate.pending == 0 and relay.gate.dropped == 2
        sock = remote_link.join_kernel(relay.address, secret, 0, 0)  # the rank is still let in
        sock.close()
        assert relay.wait_joined(10)
    finally:
        stop.set()
        feeder.join(5)
        for client in (idle, trickler):
            client.close()
        _release(relay, handles)


OUT_OF_FILES = """
import os, resource, socket, time
from test_remote_listener import _relay, _release
from notebook_launcher.protocol import remote_link

relay, handles, secret = _relay()
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
fillers = []
try:
    while True:
        fillers.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
os.close(fillers.pop())
os.close(fillers.pop())
client = socket.socket()  # takes one of the two free descriptors; the listener needs the other
client.connect(relay.address)
os.close(fillers.pop())
extra = socket.create_connection(relay.address)  # a second one: accepting it runs out
deadline = time.monotonic() + 20
while relay.gate.trouble is None and time.monotonic() < deadline:
    time.sleep(0.05)
print("trouble:", relay.gate.trouble, flush=True)
for fd in fillers:
    os.close(fd)
remote_link.join_kernel(relay.address, secret, 0, 0).close()
print("joined:", relay.wait_joined(20), flush=True)
client.close()
extra.close()
_release(relay, handles)
"""


def test_running_out_of_open_files_while_accepting_is_named():
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(OUT_OF_FILES)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=here,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (here, here.parent)))},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trouble: this kernel ran out of open files (EMFILE" in done.stdout, done.stdout
    assert "is 128)" in done.stdout and "joined: True" in done.stdout
