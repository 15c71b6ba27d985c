"""The live panel of many ranks in a real kernel: widget traffic within the frontend's budget,
a status table that stays one screen, and tqdm bars drawn as bars."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.kernel

BUDGET = 200  # widget messages a second the frontend takes (DESIGN.md: "Notebook UI facts")
ROW = re.compile(r'<tr class="nl-row')

SIXTY_FOUR = r"""
import os, time
os.environ["NOTEBOOK_LAUNCHER_MAX_PROCESSES"] = "64"
from notebook_launcher import log, notebook_launcher

def light():
    rank = int(os.environ["RANK"])
    for step in range(STEPS):
        log({"loss": 1.0 / (step + 1) + rank / 1000}, step=step)
        print(f"step {step} done", flush=True)
        time.sleep(0.15)
    return rank

started = time.monotonic()
result = notebook_launcher(light, num_processes=64, threads_per_process=1)
took = time.monotonic() - started
print(f"took {took:.3f}")
"""


def _comm_values(cell) -> list[str]:
    values = []
    for msg in cell.of_type("comm_msg"):
        state = msg["content"].get("data", {}).get("state", {})
        value = state.get("value")
        if isinstance(value, str) and "nl-status" in value:
            values.append(value)
    return values


def test_sixty_four_ranks_keep_widget_traffic_low_and_the_table_one_screen(kernel):
    cell = kernel.execute(SIXTY_FOUR.replace("STEPS", "20"), timeout=600)

    assert cell.error() is None, cell.output()
    took = float(re.search(r"took (\d+\.\d+)", cell.stream("stdout"))[1])
    comms = cell.of_type("comm_msg") + cell.of_type("comm_open")
    rate = len(comms) / took
    per_second: dict[int, int] = {}
    for msg, at in zip(cell.messages, cell.arrived, strict=True):
        if msg["msg_type"] in ("comm_msg", "comm_open"):
            per_second[int(at)] = per_second.get(int(at), 0) + 1
    print(
        f"64 ranks: {len(comms)} widget messages in {took:.1f} s ({rate:.1f}/s on average, "
        f"at most {max(per_second.values(), default=0)} in one second)"
    )
    assert comms, cell.output()  # the live panel was drawn
    assert rate < BUDGET
    # The throttles: the status table at <= 5 Hz, charts and the table of every rank at <= 1 Hz.
    assert len(comms) <= 8 * took + 20, per_second
    tables = _comm_values(cell)
    folded = [v for v in tables if 'class="nl-every' not in v and v.count("<tr") < 60]
    assert folded, tables[:1]
    assert max(len(ROW.findall(v)) for v in folded) <= 12
    assert max(len(v) for v in folded) < 15_000  # 12 rows at most, whatever N
    assert any(len(ROW.findall(v)) == 64 for v in tables)  # every rank, under the accordion
    # The final copy folds the same way and keeps every rank under a click.
    html = [m["content"]["data"].get("text/html", "") for m in cell.of_type("display_data")]
    final = next(h for h in html if "nl-panel" in h)
    table, every = final.split('<details class="nl-every-rank"')
    assert len(ROW.findall(table)) == 1 and ">0-63<" in table, table
    assert len(ROW.findall(every)) == 64


FOUR_BARS = r"""
import os, time
from tqdm.auto import tqdm
from notebook_launcher import PartialState, notebook_launcher

def bars():
    rank = int(os.environ["RANK"])
    state = PartialState()
    for epoch in range(3):
        for step in tqdm(range(40), desc=f"epoch {epoch}"):
            time.sleep(0.01 * (1 + rank))  # rank 3 is the slowest, rank 0 the fastest
            if step == 39:
                state.wait_for_everyone()  # so that they all end the loop together
        print(f"epoch {epoch} loss {1.0 / (epoch + 1) + rank:.2f}")
    return rank

result = notebook_launcher(bars, num_processes=4)
"""


def test_tqdm_bars_of_four_ranks_are_drawn_as_bars_not_lines(kernel):
    cell = kernel.execute(FOUR_BARS, timeout=300)

    assert cell.error() is None, cell.output()
    lines = cell.stream("stdout").splitlines()
    bars = [line for line in lines if "%|" in line]
    # One line per loop for all ranks when it ends, without the ranks' timings; none per update.
    assert bars == [f"[rank0-3] epoch {e}: 100%|██████████| 40/40" for e in range(3)], lines
    assert "stderr" not in cell.output_blocks()
    # The live table draws the loop as a bar: its slowest and its fastest rank.
    live = [v for v in _comm_values(cell) if 'class="nl-bar"' in v]
    assert any("slowest rank 3" in v and "fastest rank 0" in v for v in live), live[-1:]
    # The copy left in the cell shows the bars' final state.
    html = [m["content"]["data"].get("text/html", "") for m in cell.of_type("display_data")]
    final = next(h for h in html if "nl-panel" in h)
    assert re.search(r'<div class="nl-bar" data-desc="epoch 2" data-low="40" data-high="40"', final)
    assert "40/40 on 4 ranks" in final
    # Every update of each rank's bar stays in its own output, timings included.
    out = kernel.execute("print(result.output(rank=3))", timeout=30)
    assert re.search(r"epoch 2: 100%\|█+\| 40/40 \[", out.stream("stdout")), out.output()
