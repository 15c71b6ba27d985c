"""Sessions in a real ipykernel: the magics, state across cells, errors that name the rank and the
cell, interrupts, a killed rank, restart, close, and a killed kernel taking its workers along."""

from __future__ import annotations

import os
import re
import signal

import pytest
from helpers.kernelrun import alive, wait_until
from helpers.ranklabels import printed_by

pytestmark = pytest.mark.kernel

START = "%load_ext notebook_launcher\n"
SETUP = (
    "%%distributed -n 2\n"
    "import os, time, torch\n"
    "import torch.distributed as dist\n"
    "from notebook_launcher import PartialState\n"
    "rank = PartialState().process_index\n"
    "print('ready in pid', os.getpid())\n"
)
READY = re.compile(r"^\[rank(\d)\] ready in pid (\d+)$", re.M)


def open_session(kernel) -> list[int]:
    """Load the magics and start a session of 2 processes; their pids."""
    assert kernel.execute(START, timeout=30).error() is None
    cell = kernel.execute(SETUP, timeout=120)
    assert cell.error() is None, cell.output()
    pids = sorted(int(pid) for _, pid in READY.findall(cell.stream("stdout")))
    assert len(pids) == 2, cell.output()
    kernel.watch(pids)
    return pids


def assert_group_works(kernel) -> None:
    """Every rank of the open session takes part in an all_reduce."""
    reduced = kernel.execute(
        "%%distributed\nt = torch.ones(1)\ndist.all_reduce(t)\nrank, t.item()\n", timeout=60
    )
    assert reduced.result() == "[(0, 2.0), (1, 2.0)]", reduced.output()


def both_printed(cell, text: str) -> bool:
    """Whether both ranks' ``text`` has reached the cell (alike lines are shown once)."""
    lines = cell.stream().splitlines()
    return all(printed_by(lines, rank, text) for rank in (0, 1))


def close_session(kernel, pids: list[int]) -> None:
    closed = kernel.execute("%distributed close", timeout=60)
    assert closed.error() is None, closed.output()
    assert wait_until(lambda: not alive(pids), timeout=5.0), f"left running: {alive(pids)}"
    assert not kernel.workers()


def test_cells_share_each_ranks_namespace_and_output_is_labelled(kernel):
    pids = open_session(kernel)
    first = kernel.execute("%%distributed\nsteps = rank * 10\nprint('step', steps)\n", timeout=60)
    assert first.error() is None, first.output()
    assert sorted(first.stream("stdout").splitlines()) == ["[rank0] step 0", "[rank1] step 10"]
    second = kernel.execute("%%distributed\nsteps += 1\nsteps, dist.get_world_size()\n", timeout=60)
    assert second.error() is None, second.output()
    assert second.result() == "[(1, 2), (11, 2)]"
    # No new process for any cell.
    assert sorted(p.pid for p in kernel.workers()) == pids
    close_session(kernel, pids)


def test_push_and_pull_line_magics(kernel):
    pids = open_session(kernel)
    pushed = kernel.execute("base = 7\n%distributed push base\n", timeout=60)
    assert pushed.error() is None, pushed.output()
    kernel.execute("%%distributed\nmine = base + rank\n", timeout=60)
    pulled = kernel.execute("%distributed pull mine", timeout=60)
    assert pulled.result() == "[7, 8]", pulled.output()
    missing = kernel.execute("%distributed push nowhere", timeout=30)
    assert missing.error()["ename"] == "NameError"
    status = kernel.execute("%distributed status", timeout=30)
    assert "alive" in status.stream("stdout") and "2 processes" in status.stream("stdout")
    close_session(kernel, pids)


def test_an_error_on_rank_1_raises_its_type_in_the_cell_and_state_survives(kernel):
    pids = open_session(kernel)
    kernel.execute("%%distributed\nweights = torch.full((3,), float(rank))\n", timeout=60)
    failed = kernel.execute(
        "%%distributed\nif rank == 1:\n    raise ValueError('bad batch')\ndist.barrier()\n",
        timeout=60,
        store_history=True,  # numbered as a notebook's cells are: In[N]
    )
    error = failed.error()
    assert error is not None and error["ename"] == "ValueError", failed.output()
    shown = failed.traceback()
    lines = shown.splitlines()
    # Short: the message once, the rank and its traceback in the cell's own numbering and lines,
    # what was stopped, what is left of the session; no launcher or magic frames, no cell source
    # repeated.
    assert lines[0] == "ValueError: bad batch", shown
    assert shown.count("ValueError: bad batch") == 1, shown
    assert lines[1].startswith("Raised on rank 1 (pid "), shown
    assert re.fullmatch(r"  Cell In\[\d+\], line 3, in <module>", lines[2]), shown
    assert lines[3].strip() == "raise ValueError('bad batch')", shown
    assert "The call was stopped on rank 0." in lines, shown
    assert lines[-1].startswith("The session is still usable: every rank kept its namespace"), shown
    assert "get_ipython" not in shown and "notebook_launcher/" not in shown, shown
    assert len(lines) <= 8, shown
    after = kernel.execute("%%distributed\nweights.sum().item()\n", timeout=60)
    assert after.error() is None, after.output()
    assert after.result() == "[0.0, 3.0]"
    assert_group_works(kernel)
    close_session(kernel, pids)


def test_a_ddp_model_held_across_a_cell_failing_inside_backward_keeps_training(kernel):
    pids = open_session(kernel)
    built = kernel.execute(
        "%%distributed\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "def step():\n"
        "    model(torch.randn(4, 8)).pow(2).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "step()\n",
        timeout=60,
    )
    assert built.error() is None, built.output()
    failed = kernel.execute(
        "%%distributed\n"
        "loss = model(torch.randn(4, 8)).pow(2).sum()\n"
        "if rank == 1:\n"
        "    time.sleep(0.3)  # rank 0 waits in the gradients' all-reduce meanwhile\n"
        "    raise RuntimeError('a shape bug on rank 1')\n"
        "loss.backward()\n",
        timeout=60,
        store_history=True,
    )
    assert failed.error()["ename"] == "RuntimeError", failed.output()
    shown = failed.traceback()
    assert "The session is still usable" in shown, shown
    assert "DistributedDataParallel model moved onto it" in shown, shown
    trained = kernel.execute(
        "%%distributed\nstep()\nstep()\nsum(p.sum() for p in model.parameters()).item()\n",
        timeout=60,
    )
    assert trained.error() is None, trained.output()
    first, second = eval(trained.result())  # the same weights on both ranks
    assert first == second, trained.result()
    assert sorted(p.pid for p in kernel.workers()) == pids
    close_session(kernel, pids)


def test_an_interrupt_stops_the_cell_on_every_rank_and_the_session_goes_on(kernel):
    pids = open_session(kernel)
    cell = kernel.start(
        "%%distributed\n"
        "print('waiting', flush=True)\n"
        "if rank == 1:\n"
        "    time.sleep(300)\n"
        "dist.barrier()\n"
    )
    assert cell.wait_for(lambda c: both_printed(c, "waiting"), timeout=60), cell.output()
    kernel.km.interrupt_kernel()
    cell.finish(timeout=30)
    error = cell.error()
    assert error is not None and error["ename"] == "KeyboardInterrupt", cell.output()
    assert "still usable" in cell.traceback()
    assert sorted(p.pid for p in kernel.workers()) == pids  # the same processes go on
    assert_group_works(kernel)
    close_session(kernel, pids)


def test_a_killed_rank_breaks_the_session_and_restart_starts_new_workers(kernel):
    pids = open_session(kernel)
    cell = kernel.start(
        "%%distributed\nprint('in barrier', flush=True)\nif rank == 0:\n    dist.barrier()\n"
        "else:\n    time.sleep(300)\n"
    )
    assert cell.wait_for(lambda c: both_printed(c, "in barrier"), timeout=60)
    os.kill(pids[1], signal.SIGKILL)
    cell.finish(timeout=30)
    error = cell.error()
    assert error is not None and error["ename"] == "SessionBrokenError", cell.output()
    assert "rank 1" in cell.traceback() and "restart" in cell.traceback()
    assert wait_until(lambda: not alive(pids), timeout=5.0), f"left running: {alive(pids)}"
    status = kernel.execute("%distributed status", timeout=30)
    assert "broken" in status.stream("stdout")
    restarted = kernel.execute("%distributed restart", timeout=120)
    assert restarted.error() is None, restarted.output()
    assert "earlier state is gone" in restarted.stream()
    fresh = kernel.execute(SETUP, timeout=120)
    new_pids = sorted(int(pid) for _, pid in READY.findall(fresh.stream("stdout")))
    kernel.watch(new_pids)
    assert len(new_pids) == 2 and not set(new_pids) & set(pids)
    close_session(kernel, new_pids)


def test_a_launch_is_refused_while_a_session_is_open(kernel):
    pids = open_session(kernel)
    refused = kernel.execute(
        "from notebook_launcher import notebook_launcher\nnotebook_launcher(print, num_processes=2)\n",
        timeout=60,
    )
    assert refused.error()["ename"] == "LaunchBusyError", refused.output()
    assert "%distributed close" in refused.traceback()
    close_session(kernel, pids)
    again = kernel.execute("notebook_launcher(print, num_processes=2, ui='none')", timeout=120)
    assert again.error() is None, again.output()


def test_a_killed_kernel_takes_the_session_workers_with_it(kernel):
    pids = open_session(kernel)
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: not alive(pids), timeout=5.0), f"left running: {alive(pids)}"


def test_each_cell_leaves_its_own_final_panel_with_the_metrics_it_logged(kernel):
    pids = open_session(kernel)
    for metric in ("loss", "accuracy"):  # every cell's panel has that cell's metrics
        cell = kernel.execute(
            "%%distributed\n"
            "from notebook_launcher import log\n"
            "for step in range(3):\n"
            f"    log({{'{metric}': 1.0 / (step + 1) + rank}}, step=step)\n",
            timeout=60,
        )
        assert cell.error() is None, cell.output()
        kept = [m for m in cell.of_type("display_data") if "text/html" in m["content"]["data"]]
        assert len(kept) == 1, cell.output()
        shown = kept[0]["content"]["data"]["text/html"]
        assert f'data-metric="{metric}"' in shown, shown
        assert 'data-rank="0" data-state="finished"' in shown
        assert 'data-rank="1" data-state="finished"' in shown
    failed = kernel.execute("%%distributed\nassert rank == 0, 'not rank 0'\n", timeout=60)
    assert failed.error()["ename"] == "AssertionError"
    (panel,) = [m for m in failed.of_type("display_data") if "text/html" in m["content"]["data"]]
    assert 'data-rank="1" data-state="failed"' in panel["content"]["data"]["text/html"]
    close_session(kernel, pids)


def test_a_kernel_shut_down_with_a_session_open_leaves_no_worker(kernel):
    pids = open_session(kernel)
    kernel.km.shutdown_kernel(now=False)  # a polite shutdown: the session closes at exit
    assert wait_until(lambda: not alive(pids), timeout=10.0), f"left running: {alive(pids)}"


REFUSED = [
    ("%distributed", "ValueError", "needs one of: status"),
    ("%distributed launch", "ValueError", "unknown"),
    ("%%distributed\n1\n", "ValueError", "no session is open"),
    ("%%distributed -x 3\n1\n", "ValueError", "'-x'"),
    ("%%distributed -n two\n1\n", "ValueError", "'two' is not a number"),
    ("%%distributed -n 0\n1\n", "ValueError", "num_processes"),
    ("%%distributed -n 2 --timeout -1\n1\n", "ValueError", "timeout"),
    ("%%distributed -n 2 extra\n1\n", "ValueError", "extra"),
    ("%%distributed -n 2 --cluster k8s\n1\n", "ValueError", "cluster='k8s'"),
    ("%distributed start -n 2 --cluster", "ValueError", "--cluster needs a value"),
    ("%distributed pull x", "ValueError", "no session is open"),
    ("%distributed close now", "ValueError", "no session is open"),
]


def test_the_magics_refuse_bad_input_saying_what_is_allowed(kernel):
    assert kernel.execute(START, timeout=30).error() is None
    for code, error, words in REFUSED:  # one kernel for all: nothing is started by any
        cell = kernel.execute(code, timeout=60)
        assert cell.error() is not None and cell.error()["ename"] == error, (code, cell.output())
        assert words in cell.error()["evalue"], (code, cell.error()["evalue"])
        assert "magics.py" not in cell.traceback(), cell.traceback()  # the message, not our frames
        assert not kernel.workers(), code
