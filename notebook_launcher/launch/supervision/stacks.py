"""Reading the Python stacks workers dump (faulthandler's format) into something a user can act on."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...protocol.names import SHARED_MEMORY_SOURCE, WORKER_FUNCTION
from ...utils.cells import code_name

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.+)$')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
_COLLECTIVE_PATHS = ("torch/distributed/", "torch\\distributed\\")


def trim_kernel_frames(lines: list[str]) -> list[str]:
    """Drop the frames below the worker bootstrap.

    A forked worker's stack still holds the frames of the kernel that forked it (IPython,
    ipykernel, asyncio ...); they say nothing about the worker. Thread headers and other text
    after the cut are kept.
    """
    kept: list[str] = []
    skipping = False
    for line in lines:
        if _THREAD.match(line) or not line.startswith(" "):
            skipping = False
        if skipping:
            continue
        kept.append(line)
        if line.rstrip().endswith(f"in {WORKER_FUNCTION}") and _FRAME.match(line):
            skipping = True
    return kept


@dataclass(frozen=True)
class Location:
    """Where a worker's main thread was when its stack was taken."""

    function: str
    file: str
    line: int
    in_collective: bool  # inside torch.distributed: waiting for the other ranks
    in_rendezvous: bool = False  # inside torch.distributed's rendezvous: joining the job
    in_shared_memory: bool = False  # in a shared-memory collective (ops, DDP's gradients)

    def describe(self) -> str:
        where = f"{self.function} ({code_name(self.file)}:{self.line})"
        if self.in_rendezvous:
            return f"joining the job (connecting to the rendezvous store), called from {where}"
        if self.in_shared_memory:
            return f"waiting for the other ranks in a shared-memory collective, called from {where}"
        if self.in_collective:
            return f"waiting for the other ranks in torch.distributed, called from {where}"
        return f"in {where}"


def locate(stack: str) -> Location | None:
    """The main thread's innermost frame of user code, and whether it waits in a collective.

    The main thread is the one whose stack runs through the worker bootstrap.
    """
    for block in _thread_blocks(stack.splitlines()):
        frames = [m for m in map(_FRAME.match, block) if m]
        if not any(m.group("func") == WORKER_FUNCTION for m in frames):
            continue
        exchanging = any(_is_shared_memory(m.group("file")) for m in frames)
        waiting = exchanging or any(_is_collective(m.group("file")) for m in frames)
        joining = any(_is_rendezvous(m.group("file")) for m in frames)
        user = [m for m in frames if not _is_library(m.group("file"))] or frames[:1]
        for m in user:  # most recent call first
            return Location(
                m.group("func"), m.group("file"), int(m.group("line")), waiting, joining, exchanging
            )
    return None


def main_thread_frames(stack: str) -> list[tuple[str, int, str]]:
    """The main thread's frames as (file, line, function), most recent call last; [] if absent.

    The main thread is the one whose stack runs through the worker bootstrap.
    """
    for block in _thread_blocks(stack.splitlines()):
        frames = [m for m in map(_FRAME.match, block) if m]
        if any(m.group("func") == WORKER_FUNCTION for m in frames):
            return [(m.group("file"), int(m.group("line")), m.group("func")) for m in frames]
    return []


def _thread_blocks(lines: list[str]) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in lines:
        if _THREAD.match(line):
            blocks.append([])
        blocks[-1].append(line)
    return [b for b in blocks if b]


def _is_collective(path: str) -> bool:
    return any(part in path for part in _COLLECTIVE_PATHS)


def _is_shared_memory(path: str) -> bool:
    return path.replace("\\", "/").endswith(SHARED_MEMORY_SOURCE)


def _is_rendezvous(path: str) -> bool:
    return _is_collective(path) and path.replace("\\", "/").endswith(
        ("/rendezvous.py", "/elastic/rendezvous/c10d_rendezvous_backend.py")
    )


def _is_library(path: str) -> bool:
    return "site-packages" in path or "/lib/python3" in path or "notebook_launcher/" in path


def where_ranks_were(stacks: dict[int, str]) -> str:
    """One sentence per rank saying where it was, and which ranks the others were waiting for."""
    places = {rank: locate(stack) for rank, stack in sorted(stacks.items())}
    parts = [
        f"rank {rank} was {place.describe() if place else 'at an unknown place (no stack)'}"
        for rank, place in places.items()
    ]
    if not parts:
        return ""
    text = "Where each rank was: " + "; ".join(parts) + "."
    culprits = _holding_up(places)
    if culprits:
        names = ", ".join(str(r) for r in culprits)
        text += f" The waiting ranks were most likely held up by rank {names}."
    return text


def holding_up(stacks: dict[int, str]) -> tuple[int, ...]:
    """The ranks that were not waiting in a collective while others were (who held them up)."""
    return _holding_up({rank: locate(stack) for rank, stack in sorted(stacks.items())})


def _holding_up(places: dict[int, Location | None]) -> tuple[int, ...]:
    waiting = [r for r, p in places.items() if p and p.in_collective and not p.in_rendezvous]
    elsewhere = tuple(r for r, p in places.items() if p and not p.in_collective)
    return elsewhere if waiting else ()
