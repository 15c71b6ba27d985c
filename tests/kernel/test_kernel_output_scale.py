"""Many ranks in one cell: one output area, alike lines once, each rank's order across its
streams, every line kept, short interrupts, failure reports of the failing call."""

from __future__ import annotations

import re
import time

import pytest
from helpers.ranklabels import label_ranks

pytestmark = pytest.mark.kernel

EPOCHS = 5

TRAIN = r"""
import os, sys, time, warnings
from tqdm.auto import tqdm
from notebook_launcher import notebook_launcher, PartialState

def train():
    rank = int(os.environ["RANK"])
    state = PartialState()
    for epoch in range(EPOCHS):
        state.wait_for_everyone()
        for _ in tqdm(range(5), desc=f"epoch {epoch}"):
            time.sleep(0.002)
        print(f"epoch {epoch} loss {0.5 + rank / 100 + epoch:.2f}")
        print(f"epoch {epoch} checked", file=sys.stderr)
        print("epoch done")
    warnings.warn("a warning from every rank")
    return rank

result = notebook_launcher(train, num_processes=N)
result
"""


def run_train(kernel, n: int, timeout: float):
    code = TRAIN.replace("EPOCHS", str(EPOCHS)).replace("N)", f"{n})")
    cell = kernel.execute(code, timeout=timeout)
    assert cell.error() is None, cell.output()
    return cell


def assert_one_output_area(cell, n: int) -> None:
    blocks = cell.output_blocks()
    # The worker lines make one stdout output, whatever the streams; with the status panel
    # and the result the cell has a handful of outputs, far from JupyterLab's 50.
    assert blocks.count("stdout") == 1, blocks
    assert "stderr" not in blocks, blocks
    assert blocks[-1] == "execute_result", blocks
    assert len(blocks) <= 4, blocks
    assert cell.result().startswith(f"LaunchResult({n} processes")


def test_eight_ranks_make_one_output_area_with_alike_lines_once(kernel):
    cell = run_train(kernel, 8, timeout=120)

    assert_one_output_area(cell, 8)
    lines = cell.stream("stdout").splitlines()
    messages = len(cell.of_type("stream"))
    print(f"8 ranks: {len(lines)} lines in {messages} stream messages, {cell.output_blocks()}")
    # A line all ranks print alike is shown once, labelled with the ranks.
    assert lines.count("[rank0-7] epoch done") == EPOCHS, lines
    # Lines that differ (the loss) are shown per rank.
    for rank in range(8):
        for epoch in range(EPOCHS):
            assert f"[rank{rank}] epoch {epoch} loss {0.5 + rank / 100 + epoch:.2f}" in lines
    # Each rank's lines keep the order it wrote them in across stdout and stderr.
    for rank in range(8):
        own = [line for line in lines if rank in label_ranks(line)]
        epochs = [int(m[1]) for line in own if (m := re.search(r"] epoch (\d) loss", line))]
        assert epochs == list(range(EPOCHS)), own
        for epoch in range(EPOCHS):
            bar = _index(own, rf"epoch {epoch}: 100%")
            loss = _index(own, rf"epoch {epoch} loss")
            checked = _index(own, rf"epoch {epoch} checked")
            assert bar < loss < checked, own
    # A warning looks like one (red) without leaving the output area.
    assert any("\x1b[31m" in line and "UserWarning" in line for line in lines), lines


def test_every_line_of_a_rank_stays_available(kernel):
    run_train(kernel, 2, timeout=120)
    cell = kernel.execute("print(result.output(rank=1))", timeout=30)

    assert cell.error() is None, cell.output()
    text = cell.stream("stdout").splitlines()
    assert text.count("epoch done") == EPOCHS, text
    # unlabelled, stdout and stderr in the order the rank wrote them
    assert text[0].startswith("epoch 0: 100%") and text[1:3] == [
        "epoch 0 loss 0.51",
        "epoch 0 checked",
    ]
    assert [t for t in text if " loss " in t] == [
        f"epoch {e} loss {0.51 + e:.2f}" for e in range(EPOCHS)
    ]
    bad = kernel.execute("result.output(rank=5)", timeout=30)
    assert "rank=5 is not a rank of this launch" in bad.traceback(), bad.output()


LIGHT = r"""
import os
os.environ["NOTEBOOK_LAUNCHER_MAX_PROCESSES"] = "64"
from notebook_launcher import notebook_launcher, PartialState

def light():
    rank = int(os.environ["RANK"])
    state = PartialState()
    for step in range(3):
        state.wait_for_everyone()
        print(f"step {step} of rank {rank}")
        print(f"step {step} done")
    return rank

result = notebook_launcher(light, num_processes=64, threads_per_process=1)
result
"""


def test_sixty_four_ranks_fit_in_one_output_area(kernel):
    started = time.monotonic()
    cell = kernel.execute(LIGHT, timeout=600)
    took = time.monotonic() - started

    assert cell.error() is None, cell.output()
    assert_one_output_area(cell, 64)
    lines = cell.stream("stdout").splitlines()
    messages = len(cell.of_type("stream"))
    print(f"64 ranks: {took:.1f} s, {len(lines)} lines in {messages} stream messages")
    for step in range(3):
        assert f"[rank0-63] step {step} done" in lines, lines
        for rank in range(64):
            assert f"[rank{rank}] step {step} of rank {rank}" in lines
    assert len(lines) == 3 * 65


def _index(lines: list[str], pattern: str) -> int:
    for i, line in enumerate(lines):
        if re.search(pattern, line):
            return i
    raise AssertionError(f"no line matches {pattern!r}: {lines}")


SLEEPY = r"""
import os, time
from notebook_launcher import notebook_launcher

def sleeps():
    print("sleeping", flush=True)
    time.sleep(1000)

notebook_launcher(sleeps, num_processes=2)
"""


def _interrupt_when(kernel, cell, text: str) -> None:
    assert cell.wait_for(lambda c: text in c.stream(), timeout=60), cell.output()
    kernel.km.interrupt_kernel()
    cell.finish(timeout=30)


def test_an_interrupted_launch_ends_short(kernel):
    cell = kernel.start(SLEEPY)
    _interrupt_when(kernel, cell, "[rank0-1] sleeping")

    error = cell.error()
    assert error is not None and error["ename"] == "KeyboardInterrupt", cell.output()
    shown = cell.traceback()
    assert "every worker has been stopped" in shown
    for frame in ("runner.py", "api.py", "supervisor.py", "num_processes: int"):
        assert frame not in shown, shown
    assert shown.count("notebook_launcher(sleeps") == 1, shown  # the caller's line, once
    assert len(shown.splitlines()) <= 6, shown


def test_an_interrupted_session_cell_ends_short_without_the_cell_again(kernel):
    assert kernel.execute("%load_ext notebook_launcher", timeout=30).error() is None
    opened = kernel.execute("%%distributed -n 2\nimport time\n", timeout=120)
    assert opened.error() is None, opened.output()
    cell = kernel.start("%%distributed\nprint('waiting', flush=True)\ntime.sleep(1000)\n")
    _interrupt_when(kernel, cell, "waiting")

    error = cell.error()
    assert error is not None and error["ename"] == "KeyboardInterrupt", cell.output()
    shown = cell.traceback()
    assert shown.count("interrupted") >= 1 and "run_cell_magic" not in shown, shown
    assert "magics.py" not in shown and "core.py" not in shown, shown
    assert "time.sleep(1000)" not in shown.split("still usable")[-1], shown
    assert len(shown.splitlines()) <= 12, shown
    closed = kernel.execute("%distributed close", timeout=60)
    assert closed.error() is None, closed.output()


SESSION_CALLS = r"""
from notebook_launcher import Session
import os
session = Session(num_processes=2)

def first():
    print("from the first call")

def second():
    print("from the second call")
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 gives up")

first_call = session.run(first)
print(repr(first_call.output(rank=1)))
"""


def test_a_failed_session_call_reports_its_own_lines_and_its_cell(kernel):
    setup = kernel.execute(SESSION_CALLS, timeout=120, store_history=True)
    assert setup.error() is None, setup.output()
    # A session call's alike lines are shown once; its result keeps each rank's lines.
    assert setup.stream("stdout").splitlines() == [
        "[rank0-1] from the first call",
        "'from the first call\\n'",
    ], setup.output()
    failed = kernel.execute("session.run(second)", timeout=60, store_history=True)

    shown = failed.traceback()
    assert "rank 1 gives up" in shown, shown
    assert "from the second call" in shown, shown
    assert "from the first call" not in shown, shown
    # The function was defined in the first cell: its frame names that cell and shows the line.
    assert re.search(r"Cell In\[1\], line 1[0-9]", shown), shown
    assert 'raise ValueError("rank 1 gives up")' in shown, shown
    assert "<dynamic-code>" not in shown, shown
    closed = kernel.execute("session.close()", timeout=60)
    assert closed.error() is None, closed.output()


SPAWNED = r"""
import os
from notebook_launcher import notebook_launcher

def fails_on_rank_1():
    if os.environ["RANK"] == "1":
        raise RuntimeError("rank 1 stops here")
"""


def test_a_spawned_rank_names_the_cell_its_function_was_defined_in(kernel):
    defined = kernel.execute(SPAWNED, timeout=60, store_history=True)
    assert defined.error() is None, defined.output()
    failed = kernel.execute(
        "notebook_launcher(fails_on_rank_1, num_processes=2, start_method='spawn')",
        timeout=120,
        store_history=True,
    )

    shown = failed.traceback()
    assert "rank 1 stops here" in shown, shown
    assert "Cell In[1], line 6, in fails_on_rank_1" in shown, shown
    assert 'raise RuntimeError("rank 1 stops here")' in shown, shown
    assert "<dynamic-code>" not in shown, shown
