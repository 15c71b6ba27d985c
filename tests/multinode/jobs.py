"""Functions run by the multi-node tests, importable by every node and every torchrun worker."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from notebook_launcher import PartialState


def all_reduce(scale: float) -> dict:
    """Sum (global rank + 1) * scale over every rank of every node."""
    state = PartialState()
    total = torch.tensor([state.process_index + 1.0]) * scale
    dist.all_reduce(total)
    print(f"sum over {state.num_processes} ranks: {total.item():g}")
    return {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world": state.num_processes,
        "sum": total.item(),
        "node_rank": int(os.environ["GROUP_RANK"]),
    }


def fail_on_rank(rank: int) -> int:
    """Every rank meets the others once; then ``rank`` raises while the others wait for it."""
    state = PartialState()
    state.wait_for_everyone()
    if state.process_index == rank:
        raise ValueError(f"rank {rank} gives up")
    state.wait_for_everyone()
    return state.process_index


def fail_first_attempt(rank: int) -> dict:
    """``rank`` fails in the first attempt only; every rank reports the attempt it finished in."""
    state = PartialState()
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    state.wait_for_everyone()
    if attempt == 0 and state.process_index == rank:
        raise RuntimeError(f"rank {rank} fails in attempt 0")
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    return {"rank": state.process_index, "attempt": attempt, "sum": total.item()}


def where_the_store_listens() -> list[str]:
    """``ip:port`` of every socket listening on ``MASTER_PORT`` in this worker's launcher or
    the processes it started (a multi-node store is served by a process of its own)."""
    import psutil

    PartialState().wait_for_everyone()  # the store really serves the whole group
    port = int(os.environ["MASTER_PORT"])
    launcher = psutil.Process(os.getppid())
    found = set()
    for process in [launcher, *launcher.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.NoSuchProcess:  # a helper process that ended meanwhile listens nowhere
            continue
        found.update(
            f"{c.laddr.ip}:{c.laddr.port}"
            for c in connections
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        )
    return sorted(found)


def sum_and_listeners(scale: float) -> dict:
    """:func:`all_reduce`, plus where the launcher's store listens."""
    return {**all_reduce(scale), "listening": where_the_store_listens()}


def node_1_lingers(seconds: float) -> int:
    """All ranks meet; node 1's ranks then take ``seconds`` before they meet the others again."""
    state = PartialState()
    state.wait_for_everyone()
    state.print("ready")
    if int(os.environ["GROUP_RANK"]) == 1:
        time.sleep(seconds)
    state.wait_for_everyone()
    return state.process_index


def stops_at_breakpoint() -> int:
    """Reaches ``breakpoint()``: under torchrun nobody can answer its prompt."""
    breakpoint()
    return 0
