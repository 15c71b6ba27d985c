"""Worker output in a real kernel: every line arrives once, whole, labelled with its rank."""

from __future__ import annotations

import re

import pytest
from helpers.ranklabels import label_ranks, text_of

pytestmark = pytest.mark.kernel

CHATTY = r"""
import os, sys
from notebook_launcher import notebook_launcher

def chatty():
    rank = int(os.environ["RANK"])
    for i in range(20):
        text = f"line {i:02d} of rank {rank} " + "x" * 50
        if i % 3 == 0:
            print(text)
        elif i % 3 == 1:  # one line in two writes: only the joined line may be shown
            sys.stdout.write(text[:20])
            sys.stdout.flush()
            sys.stdout.write(text[20:] + "\n")
        else:  # below Python's streams, as C code writes
            sys.stdout.flush()
            os.write(1, (text + "\n").encode())
    return rank

notebook_launcher(chatty, num_processes=4)
"""

LINE = re.compile(r"^\[rank(\d)\] line (\d\d) of rank (\d) x{50}$")


def test_every_line_of_four_ranks_arrives_once_whole_and_labelled(kernel):
    cell = kernel.execute(CHATTY, timeout=60)

    assert cell.error() is None, cell.output()
    assert cell.result() == "LaunchResult(4 processes, by rank: {0: 0, 1: 1, 2: 2, 3: 3})"
    lines = cell.stream("stdout").splitlines()
    seen: dict[int, list[int]] = {rank: [] for rank in range(4)}
    for line in lines:
        match = LINE.match(line)
        assert match, f"malformed or glued line: {line!r}"
        label, index, rank = int(match[1]), int(match[2]), int(match[3])
        assert label == rank, f"line of rank {rank} labelled rank {label}: {line!r}"
        seen[rank].append(index)
    for rank, indices in seen.items():
        assert indices == list(range(20)), f"rank {rank} lines out of order or missing: {indices}"
    assert len(lines) == 80
    assert "[rank" not in cell.stream("stderr"), cell.stream("stderr")


KERNEL_STREAMS = r"""
import logging, os, sys
from notebook_launcher import notebook_launcher

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", force=True)
logging.getLogger("notebook_launcher").setLevel(logging.WARNING)  # its own notes (a taken port) are not the workers'
notebook_stdout = sys.stdout  # as a progress bar created in an earlier cell would keep it

def uses_kernel_streams():
    rank = os.environ["RANK"]
    for i in range(5):
        logging.info("logged %d by rank %s", i, rank)
        print("printed", i, "by rank", rank, file=notebook_stdout)

print("kernel line still buffered at the fork")  # flushed once for all the forks, shown once
notebook_launcher(uses_kernel_streams, num_processes=2)
print("streams after:", type(sys.stdout).__name__, type(sys.stderr).__name__)
"""


def test_output_through_kernel_stream_objects_kept_from_before_the_launch_is_labelled(kernel):
    """ipykernel's stream objects, copied into forked workers, must not bypass the launcher."""
    cell = kernel.execute(KERNEL_STREAMS, timeout=60)

    assert cell.error() is None, cell.output()
    # In a notebook both streams share the cell's one output area (stdout).
    expected = {f"[rank{r}] printed {i} by rank {r}" for r in range(2) for i in range(5)}
    expected |= {f"[rank{r}] INFO logged {i} by rank {r}" for r in range(2) for i in range(5)}
    shown = cell.stream("stdout").splitlines()
    assert shown[0] == "kernel line still buffered at the fork", shown
    assert shown[-1] == "streams after: OutStream OutStream", shown  # the kernel's own, put back
    assert sorted(shown[1:-1]) == sorted(expected), shown
    assert cell.stream("stderr") == ""


TQDM = r"""
import os, time
from rich.progress import track
from tqdm.auto import tqdm  # in a kernel: tqdm's notebook bar, an ipywidget
from notebook_launcher import notebook_launcher

def bars():
    pause = 0.01 + 0.002 * int(os.environ["RANK"])  # each rank's bar its own speed
    for _ in track((step for step in range(20)), description="warm-up", show_speed=True):
        time.sleep(pause)
    bar = tqdm(range(30), desc="epoch 1")
    for _ in bar:
        time.sleep(0.02)
    return type(bar).__module__

result = notebook_launcher(bars, num_processes=2)
print(result.values, result.panel.model.ranks[0].done, result.panel.model.ranks[0].total)
assert all(" it/s" in result.output(rank).splitlines()[0] for rank in (0, 1))  # kept there
"""


def test_tqdm_and_rich_bars_in_the_workers_reach_the_cell_and_the_status_panel(kernel):
    cell = kernel.execute(TQDM, timeout=60)

    assert cell.error() is None, cell.output()
    # A forked process's widgets would be dropped: each rank's bar comes back as text, its last
    # state once it closed, labelled like any other line, in the cell's one output area.
    out = cell.stream("stdout").splitlines()
    for rank in (0, 1):
        # Alone or grouped with the other rank: the bar's last state without its timings.
        (line,) = [
            x for x in out if rank in label_ranks(x) and text_of(x).startswith("epoch 1: 100%")
        ]
        assert "30/30" in line
    # rich writes its bar's last state on stdout, with the rank's speed ("warm-up ━━━ 49.5 it/s"):
    # without it, the ranks' alike bars are shown once.
    rich = [x for x in out if text_of(x).startswith("warm-up ━━━")]
    assert [label_ranks(x) for x in rich] == [{0, 1}], out
    assert "it/s" not in rich[0], rich
    assert cell.stream("stderr") == ""
    # And its count filled the rank's progress column of the status panel.
    assert cell.stream("stdout").splitlines()[-1] == "['tqdm.std', 'tqdm.std'] 30 30"
