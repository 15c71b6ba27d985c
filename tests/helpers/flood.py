"""A flood of hostile connections against a launch's listener: a kernel (a process of its own,
limited to 1,024 open files as many machines limit a notebook's kernel) launches 2 ranks on a Ray
cluster while another process opens 1,000 connections to its listener at once, none of which
ever authenticates. Shared by the Ray lane's test and ``benchmarks/listener_flood.py``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil

FILE_LIMIT = 1024
KERNEL = """
import os, resource, sys, threading, time
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import ray
from notebook_launcher import RayCluster, notebook_launcher

ray.init(address=sys.argv[1], log_to_driver=False)
peak = {"fds": 0, "threads": 0}

def measure():
    while True:
        peak["fds"] = max(peak["fds"], len(os.listdir("/proc/self/fd")))
        peak["threads"] = max(peak["threads"], threading.active_count())
        time.sleep(0.02)

print("joined", flush=True)
sys.stdin.readline()
threading.Thread(target=measure, daemon=True).start()
cluster = RayCluster(resources_per_process={"CPU": 1, "slot": 1}, timeout=300)
started = time.monotonic()
try:
    values = notebook_launcher(os.getpid, num_processes=2, cluster=cluster, ui="none").values
    print("result", len(values), flush=True)
except Exception as error:
    print("error", type(error).__name__, str(error).replace(chr(10), " | "), flush=True)
print(f"took {time.monotonic() - started:.2f} peak_fds {peak['fds']} peak_threads {peak['threads']}", flush=True)
"""


def open_connections(address: tuple[str, int], count: int) -> list[socket.socket]:
    """``count`` connections to ``address`` opened at once, that never send a byte."""
    clients = []
    for _ in range(count):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(address)
        clients.append(client)
    return clients


def _listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _new_listener(pid: int, known: set, limit: float) -> tuple[str, int] | None:
    """The first socket ``pid`` listens on that is not in ``known`` (the launch's listener: the
    kernel had joined the cluster before), within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        new = _listening(pid) - known
        if new:
            return min(new)
        time.sleep(0.005)
    return None


def flooded_launch(cluster_address: str, count: int = 1000, limit: float = 400.0) -> dict:
    """Run the kernel above against ``cluster_address`` with ``count`` hostile connections
    (0: none) opened as soon as its listener is up. Its lines, by their first word (and
    ``listening``: the listener's address)."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, cluster_address, str(FILE_LIMIT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    lines: dict[str, str] = {}
    clients: list[socket.socket] = []
    deadline = time.monotonic() + limit
    try:
        for line in kernel.stdout:
            word, _, rest = line.strip().partition(" ")
            lines[word] = rest
            if word == "joined":
                known = _listening(kernel.pid)
                kernel.stdin.write("go\n")
                kernel.stdin.flush()
                address = _new_listener(kernel.pid, known, 120)
                lines["listening"] = f"{address}"
                if address is not None and count:
                    clients = open_connections(address, count)
            if word == "took" or time.monotonic() > deadline:
                break
        kernel.wait(max(1.0, deadline - time.monotonic()))
    finally:
        kernel.kill()
        kernel.wait(30)
        for client in clients:
            client.close()
    lines["stderr"] = kernel.stderr.read()[-3000:]
    return lines
