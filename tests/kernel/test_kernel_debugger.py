"""A debugger on the ranks, in a real ipykernel answering ``input_request``s as a frontend does:
breakpoints in a launch and in a session, pdb commands, several ranks at once, ``input()``, a
stall that does not fire at a prompt, ``q``, an interrupt, and a frontend that takes no input."""

from __future__ import annotations

import ast
import queue
import re
import time

import pytest
from helpers.kernelrun import alive, strip_ansi, wait_until

from notebook_launcher.launch.supervision.relay import ANSWERED_THERE, WAIT_TO_ANSWER

pytestmark = pytest.mark.kernel

PROMPT_WAIT = 90.0  # seconds for a prompt (the first one starts the workers)
LAUNCH = r"""
import os
from notebook_launcher import notebook_launcher

def train(where):
    rank = int(os.environ["RANK"])  # (IPython drops the cell's first, empty line)
    x = rank * 10
    if where == "all" or rank == where:
        breakpoint()
    y = x + 1
    return y
"""


def defined(kernel, code: str = LAUNCH) -> None:
    cell = kernel.execute(code, timeout=60, store_history=True)
    assert cell.error() is None, cell.output()


def stopped(cell, prompt: str, where: str) -> None:
    """The cell's next prompt is ``prompt``, and the cell showed ``where`` (a pattern) by then."""
    assert cell.prompt(PROMPT_WAIT) == prompt, cell.output()
    assert re.search(where, cell.stream()), cell.output()


def printed(cell, command: str, line: str) -> None:
    """Answer ``command``; the rank's output before the next prompt includes ``line``."""
    cell.answer(command)
    cell.prompt(30)
    assert line in cell.stream().splitlines(), cell.output()


def launch(kernel, call: str, **settings) -> object:
    extra = "".join(f", {key}={value!r}" for key, value in settings.items())
    return kernel.start(
        f"notebook_launcher(train, args=({call},), num_processes=2{extra}).values",
        store_history=True,
        allow_stdin=True,
    )


def test_breakpoint_on_one_rank_takes_pdb_commands_in_the_cell(kernel):
    defined(kernel)
    cell = launch(kernel, "1")
    prompt = cell.prompt(PROMPT_WAIT)
    assert prompt == "(Pdb rank 1) ", cell.output()
    # Where it stopped, as IPython names a cell.
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 9, in train\(\)", cell.stream()), (
        cell.output()
    )
    assert "[rank1] -> y = x + 1" in cell.stream(), cell.output()
    cell.answer("p x")
    cell.prompt(30)
    assert "[rank1] 10" in cell.stream().splitlines(), cell.output()
    cell.answer("n")
    cell.prompt(30)
    cell.answer("p y, rank")
    cell.prompt(30)
    assert "[rank1] (11, 1)" in cell.stream().splitlines(), cell.output()
    before = len(cell.stream())
    cell.answer("w")
    cell.prompt(30)
    where = cell.stream()[before:]
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 10, in train\(\)", where), where
    assert "bootstrap" not in where and "ipykernel" not in where, where  # the user's frames only
    cell.answer("c")
    cell.finish(60)
    assert cell.error() is None, cell.output()
    assert cell.result() == "[1, 11]", cell.output()


def test_every_rank_stopped_switching_and_a_command_sent_to_all(kernel):
    defined(kernel)
    cell = launch(kernel, '"all"')
    first = cell.prompt(PROMPT_WAIT)
    assert first in ("(Pdb rank 0) ", "(Pdb rank 1) "), cell.output()
    # Both ranks stop; the cell says which other rank waits once both are there.
    deadline = time.monotonic() + 30
    while "also waits at a prompt" not in cell.stream() and time.monotonic() < deadline:
        cell.answer("p x")
        cell.prompt(30)
    assert re.search(r"rank [01] also waits at a prompt", cell.stream()), cell.output()
    cell.answer("rank 1")
    assert cell.prompt(30) == "(Pdb rank 1) "
    cell.answer("rank 0")
    assert cell.prompt(30) == "(Pdb rank 0) "
    cell.answer("rank 5")
    assert cell.prompt(30) == "(Pdb rank 0) "
    assert "rank 5 is not at a prompt" in cell.stream(), cell.output()
    cell.answer("ranks all p x * 2")
    cell.prompt(30)
    lines = cell.stream().splitlines()
    assert "[rank0] 0" in lines and "[rank1] 20" in lines, cell.output()
    cell.answer("ranks all c")
    cell.finish(60)
    assert cell.error() is None, cell.output()
    assert cell.result() == "[1, 11]", cell.output()


def test_quitting_the_debugger_ends_the_launch_with_a_clear_error(kernel):
    defined(kernel)
    cell = launch(kernel, "1")
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) "
    cell.answer("q")
    cell.finish(60)
    error = cell.error()
    assert error is not None and error["ename"] == "DebuggerQuit", cell.output()
    assert "you quit the debugger on rank 1" in cell.traceback(), cell.output()
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()


def test_input_and_getpass_on_a_rank_prompt_in_the_cell(kernel):
    defined(
        kernel,
        "import getpass, os\nfrom notebook_launcher import notebook_launcher\n"
        "def ask():\n"
        "    if os.environ['RANK'] != '1':\n"
        "        return None\n"
        "    name = input('name? ')\n"
        "    secret = getpass.getpass('secret? ')\n"
        "    return name, len(secret)\n",
    )
    cell = kernel.start(
        "notebook_launcher(ask, num_processes=2).values", store_history=True, allow_stdin=True
    )
    assert cell.converse(["ada", "hunter2"], PROMPT_WAIT) == [
        "[rank 1] name? ",
        "[rank 1] secret? ",
    ]
    cell.finish(60)
    assert cell.result() == "[None, ('ada', 7)]", cell.output()


def test_no_stall_is_noticed_or_stops_a_rank_at_a_prompt(kernel):
    defined(kernel)
    cell = launch(kernel, "1", stall_notice=1.0, stall_timeout=2.0, timeout=30.0)
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) "
    time.sleep(4.0)  # longer than stall_notice and stall_timeout
    cell.answer("p x")
    cell.prompt(30)
    time.sleep(3.0)
    cell.answer("c")
    cell.finish(60)
    assert cell.error() is None, cell.output()
    assert cell.result() == "[1, 11]", cell.output()
    assert "no rank has made progress" not in cell.stream(), cell.output()


def status_tables(cell) -> list[str]:
    """The status table's HTML, in the order the cell's widget messages drew it."""
    tables = []
    for msg in cell.messages:
        if msg["msg_type"] not in ("comm_open", "comm_msg"):
            continue
        value = msg["content"].get("data", {}).get("state", {}).get("value", "")
        if isinstance(value, str) and "nl-status" in value:
            tables.append(value)
    return tables


def rank_row(table: str, rank: int) -> str:
    match = re.search(rf'<tr class="nl-row[^"]*" data-rank="{rank}".*?</tr>', table)
    assert match is not None, table
    return match[0]


def test_the_status_table_says_in_debugger_while_the_cell_waits_at_the_prompt(kernel):
    defined(kernel)
    cell = launch(kernel, "1", ui="widgets")
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    # What the frontend shows while the cell waits is the last table drawn before the prompt.
    assert "in debugger" in rank_row(status_tables(cell)[-1], 1), status_tables(cell)[-1:]
    assert "in debugger" not in rank_row(status_tables(cell)[-1], 0)
    for command in ("p x", "n"):  # the rank answers and asks again at once, every time
        time.sleep(0.5)
        cell.answer(command)
        cell.prompt(30)
        assert "in debugger" in rank_row(status_tables(cell)[-1], 1), status_tables(cell)[-1:]
    cell.answer("c")
    cell.finish(60)
    assert cell.result() == "[1, 11]", cell.output()


def test_a_frontend_without_input_gets_a_clear_error_not_a_hang(kernel):
    defined(kernel)
    blocked = kernel.start("notebook_launcher(train, args=(1,), num_processes=2)")  # no stdin
    blocked.finish(90)
    error = blocked.error()
    assert error is not None and error["ename"] == "StdinUnavailableError", blocked.output()
    text = blocked.traceback()
    assert "rank 1 entered the debugger" in text and "nobody can answer" in text, text
    assert "PYTHONBREAKPOINT=0" in text, text
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()


def test_breakpoint_honours_pythonbreakpoint_zero(kernel):
    defined(kernel)
    cell = kernel.execute(
        "os.environ['PYTHONBREAKPOINT'] = '0'\n"
        "try:\n"
        "    print(notebook_launcher(train, args=('all',), num_processes=2).values)\n"
        "finally:\n"
        "    del os.environ['PYTHONBREAKPOINT']\n",
        timeout=90,
    )
    assert cell.error() is None, cell.output()
    assert "[1, 11]" in cell.stream(), cell.output()


def test_interrupting_the_kernel_at_a_prompt_stops_the_launch(kernel):
    defined(kernel)
    cell = launch(kernel, "1")
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) "
    pids = [p.pid for p in kernel.workers()]
    kernel.km.interrupt_kernel()
    cell.finish(60)
    error = cell.error()
    assert error is not None and error["ename"] == "KeyboardInterrupt", cell.output()
    assert wait_until(lambda: not alive(pids), 10.0), alive(pids)
    after = kernel.execute(
        "notebook_launcher(train, args=(None,), num_processes=2).values", timeout=90
    )
    assert after.result() == "[1, 11]", after.output()


SESSION = (
    "%%distributed -n 2\n"
    "import os\n"
    "rank = int(os.environ['RANK'])\n"
    "def helper(v):\n"
    "    w = v + 1\n"
    "    if rank == 1:\n"
    "        breakpoint()\n"
    "    return w\n"
)


def session_opened(kernel, setup: str = SESSION) -> None:
    """Load the magics and open a session of 2 ranks with ``setup``."""
    assert kernel.execute("%load_ext notebook_launcher", timeout=30).error() is None
    ready = kernel.execute(setup, timeout=120, store_history=True)
    assert ready.error() is None, ready.output()


def test_breakpoint_in_a_session_cell_then_quit_and_the_session_goes_on(kernel):
    session_opened(kernel)
    cell = kernel.start(
        "%%distributed\nz = helper(rank * 100)\nz\n", store_history=True, allow_stdin=True
    )
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    cell.answer("p v, w")
    cell.prompt(30)
    assert "[rank1] (100, 101)" in cell.stream().splitlines(), cell.output()
    cell.answer("u")
    cell.prompt(30)
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 2, in <module>\(\)", cell.stream()), (
        cell.output()
    )
    cell.answer("d")
    cell.prompt(30)
    cell.answer("c")
    cell.finish(60)
    assert cell.result() == "[1, 101]", cell.output()
    quitting = kernel.start("%%distributed\nhelper(5)\n", store_history=True, allow_stdin=True)
    assert quitting.prompt(PROMPT_WAIT) == "(Pdb rank 1) "
    quitting.answer("q")
    quitting.finish(60)
    assert "you quit the debugger on rank 1" in quitting.traceback(), quitting.output()
    after = kernel.execute("%%distributed\nrank + 1\n", timeout=60)
    assert after.result() == "[1, 2]", after.output()
    only = kernel.execute("%%distributed --ranks 1\nrank * 10\n", timeout=60)
    assert only.result() == "[10]", only.output()
    pids = [p.pid for p in kernel.workers()]
    assert kernel.execute("%distributed close", timeout=60).error() is None
    assert wait_until(lambda: not alive(pids), 10.0)


@pytest.mark.parametrize(
    ("stop", "prompt"),
    [("breakpoint()", "(Pdb rank 1) "), ("__import__('ipdb').set_trace()", "ipdb rank 1> ")],
)
def test_interrupt_at_a_prompt_in_a_session_keeps_the_session(kernel, stop, prompt):
    session_opened(kernel, SESSION.replace("breakpoint()", stop))
    cell = kernel.start("%%distributed\nhelper(1)\n", store_history=True, allow_stdin=True)
    assert cell.prompt(PROMPT_WAIT) == prompt, cell.output()
    kernel.km.interrupt_kernel()
    cell.finish(60)
    assert cell.error() is not None and cell.error()["ename"] == "KeyboardInterrupt"
    after = kernel.execute("%%distributed\nrank * 2\n", timeout=60)
    assert after.result() == "[0, 2]", after.output()
    pids = [p.pid for p in kernel.workers()]
    assert kernel.execute("%distributed close", timeout=60).error() is None
    assert wait_until(lambda: not alive(pids), 10.0)


def test_a_forked_rank_keeps_nothing_of_the_kernels_input_machinery(kernel):
    cell = kernel.execute(
        "import builtins, getpass, sys\n"
        "from notebook_launcher import notebook_launcher\n"
        "def inherited():\n"
        "    return (\n"
        "        sys.breakpointhook is sys.__breakpointhook__,\n"
        "        type(sys.stdin).__module__,\n"
        "        builtins.input.__module__,\n"
        "        getpass.getpass.__module__,\n"
        "        get_ipython().kernel._input_request.__module__,\n"
        "    )\n"
        "notebook_launcher(inherited, num_processes=1).values[0]\n",
        timeout=90,
    )
    assert cell.error() is None, cell.output()
    expected = (True,) + ("notebook_launcher.worker.prompts",) * 4
    assert ast.literal_eval(cell.result()) == expected, cell.output()


def test_breakpoint_in_a_spawned_rank_names_the_cell_and_lists_its_source(kernel):
    defined(kernel)
    cell = launch(kernel, "1", start_method="spawn")
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    # The function travels by value, with its cell's name and lines: as a forked rank shows it.
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 9, in train\(\)", cell.stream()), (
        cell.output()
    )
    assert "[rank1] -> y = x + 1" in cell.stream(), cell.output()
    before = len(cell.stream())
    cell.answer("l")
    cell.prompt(30)
    listed = cell.stream()[before:]
    assert re.search(r"\[rank1\]\s+8\s+breakpoint\(\)", listed), listed
    assert re.search(r"\[rank1\]\s+9\s+->\s+y = x \+ 1", listed), listed
    cell.answer("p x + 1")
    cell.prompt(30)
    assert "[rank1] 11" in cell.stream().splitlines(), cell.output()
    cell.answer("c")
    cell.finish(60)
    assert cell.result() == "[1, 11]", cell.output()


def test_breakpoint_in_a_spawned_sessions_rank_names_the_cell(kernel):
    defined(
        kernel,
        "import os\n"
        "from notebook_launcher import Session\n"
        "session = Session(num_processes=2, start_method='spawn')\n"
        "def probe(v):\n"
        "    w = v + int(os.environ['RANK'])\n"
        "    if w == 6:\n"
        "        breakpoint()\n"
        "    return w\n",
    )
    cell = kernel.start("session.run(probe, 5).values", store_history=True, allow_stdin=True)
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 8, in probe\(\)", cell.stream()), (
        cell.output()
    )
    before = len(cell.stream())
    cell.answer("ll")
    cell.prompt(30)
    assert re.search(r"\[rank1\]\s+5\s+w = v \+ int", cell.stream()[before:]), cell.output()
    cell.answer("c")
    cell.finish(60)
    assert cell.result() == "[5, 6]", cell.output()
    pids = [p.pid for p in kernel.workers()]
    assert kernel.execute("session.close()", timeout=60).error() is None
    assert wait_until(lambda: not alive(pids), 10.0), alive(pids)


IPDB = LAUNCH.replace("        breakpoint()", "        import ipdb\n        ipdb.set_trace()")


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_ipdb_set_trace_on_a_rank_prompts_in_the_cell(kernel, start_method):
    defined(kernel, IPDB)
    cell = launch(kernel, "1", start_method=start_method)
    assert cell.prompt(PROMPT_WAIT) == "ipdb rank 1> ", cell.output()
    shown = strip_ansi(cell.stream())
    # ipdb's own location line and context, with the cell named as pdb names it.
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 10, in train\(\)", shown), shown
    assert re.search(r"\[rank1\] -+> 10\s+y = x \+ 1", shown), shown
    cell.answer("p x")
    cell.prompt(30)
    assert "[rank1] 10" in strip_ansi(cell.stream()).splitlines(), cell.output()
    cell.answer("n")
    cell.prompt(30)
    cell.answer("p y")
    cell.prompt(30)
    assert "[rank1] 11" in strip_ansi(cell.stream()).splitlines(), cell.output()
    cell.answer("c")
    cell.finish(60)
    assert cell.error() is None, cell.output()
    assert cell.result() == "[1, 11]", cell.output()


FAILING_STEP = (
    "%%distributed\n"
    "def step(batch):\n"
    "    out = batch * 2\n"
    "    if rank == 1:\n"
    "        raise ValueError(f'bad batch {batch}')\n"
    "    return out\n"
    "step(rank + 5)\n"
)


def test_debug_after_a_failed_session_call_opens_on_the_failing_rank(kernel):
    session_opened(kernel)
    failed = kernel.execute(FAILING_STEP, timeout=60, store_history=True)
    assert failed.error() is not None and failed.error()["ename"] == "ValueError", failed.output()
    cell = kernel.start("%debug", store_history=True, allow_stdin=True)
    stopped(cell, "(Pdb rank 1) ", r"\[rank1\] > Cell In\[\d+\], line 5, in step\(\)")
    printed(cell, "p out, batch", "[rank1] (12, 6)")
    cell.answer("q")
    cell.finish(60)
    assert cell.error() is None, cell.output()
    after = kernel.execute("%%distributed\nrank + 1\n", timeout=60)
    assert after.result() == "[1, 2]", after.output()
    # %debug after an error of the kernel's own is IPython's.
    assert kernel.execute("1 / 0", timeout=30).error() is not None
    local = kernel.start("%debug", allow_stdin=True)
    assert local.prompt(30) == "ipdb> ", local.output()
    local.answer("q")
    local.finish(30)
    pids = [p.pid for p in kernel.workers()]
    assert kernel.execute("%distributed close", timeout=60).error() is None
    assert wait_until(lambda: not alive(pids), 10.0)


def test_pdb_on_opens_the_failing_ranks_frame_in_the_failing_cell(kernel):
    session_opened(kernel)
    assert kernel.execute("%pdb on", timeout=30).error() is None
    cell = kernel.start(FAILING_STEP, store_history=True, allow_stdin=True)
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    cell.answer("p out")
    cell.prompt(30)
    assert "[rank1] 12" in cell.stream().splitlines(), cell.output()
    cell.answer("q")
    cell.finish(60)  # no second debugger (IPython's, in the kernel's frames) follows
    assert cell.error() is not None and cell.error()["ename"] == "ValueError", cell.output()
    assert kernel.execute("%pdb off", timeout=30).error() is None
    after = kernel.execute("%%distributed\nrank + 1\n", timeout=60)
    assert after.result() == "[1, 2]", after.output()
    pids = [p.pid for p in kernel.workers()]
    assert kernel.execute("%distributed close", timeout=60).error() is None
    assert wait_until(lambda: not alive(pids), 10.0)


FAILING_LAUNCH = r"""
import os
import time
from notebook_launcher import notebook_launcher

def fails_on_one():
    rank = int(os.environ["RANK"])
    x = 10
    if rank == 1:
        raise ValueError(f"rank {rank} got x={x}")
    time.sleep(300)  # rank 0 runs on until the launch stops it
    return x
"""


@pytest.mark.parametrize("leave", ["c", "q"])
def test_pdb_on_stops_a_launchs_failing_rank_in_the_debugger_before_the_others(kernel, leave):
    defined(kernel, FAILING_LAUNCH)
    assert kernel.execute("%pdb on", timeout=30).error() is None
    cell = kernel.start(
        "notebook_launcher(fails_on_one, num_processes=2)", store_history=True, allow_stdin=True
    )
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 9, in fails_on_one\(\)", cell.stream()), (
        cell.output()
    )
    # The other rank is not stopped while rank 1 is at the prompt.
    assert len(kernel.workers()) == 2, kernel.workers()
    cell.answer("p x")
    cell.prompt(30)
    assert "[rank1] 10" in cell.stream().splitlines(), cell.output()
    cell.answer(leave)
    cell.finish(60)  # rank 0 is stopped; no second debugger (IPython's) follows
    with pytest.raises(queue.Empty):
        kernel.kc.get_stdin_msg(timeout=0.5)
    error = cell.error()
    assert error is not None and error["ename"] == "ValueError", cell.output()
    assert "rank 1 got x=10" in cell.traceback(), cell.output()
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()
    # Without %pdb on, the same failure ends the launch at once, with no prompt.
    assert kernel.execute("%pdb off", timeout=30).error() is None
    plain = kernel.start(
        "notebook_launcher(fails_on_one, num_processes=2)", store_history=True, allow_stdin=True
    )
    plain.finish(60)
    with pytest.raises(queue.Empty):  # no prompt was asked
        kernel.kc.get_stdin_msg(timeout=0.5)
    error = plain.error()
    assert error is not None and error["ename"] == "ValueError", plain.output()
    assert "rank 1 got x=10" in plain.traceback(), plain.output()
    assert "post-mortem" not in plain.output(), plain.output()
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()


def test_pdb_on_without_input_leaves_a_launchs_failure_as_it_is(kernel):
    defined(kernel, FAILING_LAUNCH)
    assert kernel.execute("%pdb on", timeout=30).error() is None
    cell = kernel.execute("notebook_launcher(fails_on_one, num_processes=2)", timeout=60)
    # The rank reports at once (IPython's own %pdb then fails to read input, as for any error).
    assert cell.error() is not None, cell.output()
    assert "rank 1 got x=10" in cell.output(), cell.output()
    assert "post-mortem debugger of rank" not in cell.output(), cell.output()
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()


DDP_SETUP = (
    "%%distributed -n 2\n"
    "import torch\n"
    "from torch.nn.parallel import DistributedDataParallel\n"
    "from notebook_launcher import PartialState\n"
    "rank = PartialState().process_index\n"
    "torch.manual_seed(0)\n"
    "model = DistributedDataParallel(torch.nn.Linear(8, 2))\n"
)
DDP_STEP = (
    "%%distributed\n"
    "def train_step(batch):\n"
    "    x = batch * 2\n"
    "    out = model(x)\n"
    "    out.sum().backward()\n"
    "    return tuple(out.shape)\n"
    "width = 5 if rank == 1 else 8  # rank 1's batch has the wrong shape\n"
    "train_step(torch.randn(4, width))\n"
)


def test_debug_after_a_ddp_shape_error_opens_on_the_users_line_in_the_failing_rank(kernel):
    session_opened(kernel, DDP_SETUP)
    pids = [p.pid for p in kernel.workers()]
    kernel.watch(pids)
    failed = kernel.execute(DDP_STEP, timeout=90, store_history=True)
    error = failed.error()
    assert error is not None and error["ename"] == "RuntimeError", failed.output()
    assert "mat1 and mat2 shapes cannot be multiplied" in failed.traceback(), failed.output()
    cell = kernel.start("%debug", store_history=True, allow_stdin=True)
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    # The user's line that called into torch, not torch's frame that raised.
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 4, in train_step\(\)", cell.stream()), (
        cell.output()
    )
    assert "[rank1] -> out = model(x)" in cell.stream(), cell.output()
    cell.answer("p x.shape, batch.shape")
    cell.prompt(30)
    lines = cell.stream().splitlines()
    assert "[rank1] (torch.Size([4, 5]), torch.Size([4, 5]))" in lines, cell.output()
    before = len(cell.stream())
    cell.answer("u")
    cell.prompt(30)
    assert re.search(r"\[rank1\] > Cell In\[\d+\], line 8, in <module>\(\)", cell.stream()[before:])
    cell.answer("p width")
    cell.prompt(30)
    assert "[rank1] 5" in cell.stream().splitlines(), cell.output()
    cell.answer("d")
    cell.prompt(30)
    before = len(cell.stream())
    cell.answer("d")  # down into torch's frames, where the error was raised
    cell.prompt(30)
    assert re.search(r"\[rank1\] > \S*torch/nn/", cell.stream()[before:]), cell.output()
    cell.answer("q")
    cell.finish(60)
    assert cell.error() is None, cell.output()
    # The session goes on with every rank: a right-shaped step trains on both.
    step = kernel.execute("%%distributed\ntrain_step(torch.randn(4, 8))\n", timeout=60)
    assert step.result() == "[(4, 2), (4, 2)]", step.output()
    assert sorted(p.pid for p in kernel.workers()) == sorted(pids)
    assert kernel.execute("%distributed close", timeout=60).error() is None
    assert wait_until(lambda: not alive(pids), 10.0), alive(pids)


def in_background(kernel, call: str, function: str = "train") -> None:
    """Start ``handle = launch_in_background(...)`` from a cell that takes input."""
    started = kernel.start(
        "from notebook_launcher import launch_in_background\n"
        f"handle = launch_in_background({function}, args=({call},), num_processes=2, "
        "stall_notice=1.0, stall_timeout=2.0, timeout=60.0)\n",
        store_history=True,
        allow_stdin=True,
    )
    started.finish(60)
    assert started.error() is None, started.output()


def panel_lines(kernel) -> str:
    """The lines under the background launch's panel, one string."""
    return ast.literal_eval(kernel.execute("'\\n'.join(handle.view.log.lines)", 30).result())


def panel_says(kernel, text: str) -> bool:
    """Whether the lines under the background launch's panel came to include ``text``."""
    return bool(wait_until(lambda: text in panel_lines(kernel), PROMPT_WAIT, interval=1.0))


def test_a_background_launchs_breakpoint_is_answered_by_the_cell_that_waits_on_it(kernel):
    defined(kernel)
    in_background(kernel, "1")
    # Rank 1 waits at its prompt, longer than the stall limits, and the panel says how to answer.
    assert panel_says(kernel, "rank 1 is in the debugger: call handle.wait() in a cell to answer")
    time.sleep(3.0)
    assert kernel.execute("handle.done", 30).result() == "False"
    cell = kernel.start("handle.wait(timeout=120).values", store_history=True, allow_stdin=True)
    # The waiting cell shows where the rank stopped, and what each command prints.
    stopped(cell, "(Pdb rank 1) ", r"\[rank1\] > Cell In\[\d+\], line 9, in train\(\)")
    printed(cell, "p x", "[rank1] 10")
    printed(cell, "p x + 5", "[rank1] 15")
    # Interrupting the waiting cell leaves the rank at its prompt, for the next cell that waits.
    kernel.km.interrupt_kernel()
    cell.finish(60)
    assert cell.error() is not None and cell.error()["ename"] == "KeyboardInterrupt"
    assert kernel.execute("handle.done", 30).result() == "False"
    # The debugger's lines were shown once, in the cell that answered: the panel kept a line
    # that says so (and, once that cell returned, how to answer again), result.output every one.
    assert panel_says(kernel, f"rank 1 is in the debugger: {WAIT_TO_ANSWER}")
    panel = panel_lines(kernel).splitlines()
    assert panel == [
        f"notebook_launcher: rank 1 is in the debugger: {t}"
        for t in (ANSWERED_THERE, WAIT_TO_ANSWER)
    ], panel
    assert cell.stream().count("in train()") == 1, cell.output()
    assert cell.stream().splitlines().count("[rank1] 10") == 1, cell.output()
    again = kernel.start("handle.wait(timeout=120).values", store_history=True, allow_stdin=True)
    assert again.prompt(30) == "(Pdb rank 1) ", again.output()
    again.answer("c")
    again.finish(60)
    assert again.error() is None, again.output()
    assert again.result() == "[1, 11]", again.output()
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()
    kept = ast.literal_eval(kernel.execute("handle.result.output(1)", 30).result()).splitlines()
    assert kept[0].endswith("in train()") and kept[2:4] == ["10", "15"], kept


ON_FILE = r"""
import os, threading, time

def on_file(path, act):
    # calls act() in another thread once path exists (two minutes at most)
    def watch():
        end = time.monotonic() + 120
        while not os.path.exists(path) and time.monotonic() < end:
            time.sleep(0.05)
        act()
    threading.Thread(target=watch, daemon=True).start()

def failing(path):
    rank = int(os.environ["RANK"])
    if rank == 1:
        breakpoint()
        return rank
    end = time.monotonic() + 120
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.05)
    raise ValueError("rank 0 gave up")
"""


def rank0_fails_at_rank1s_prompt(cell, fail) -> None:
    """``cell`` waits in input() at rank 1's prompt; rank 0 fails (once ``fail`` exists): the
    cell reports that failure, nothing typed."""
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    fail.touch()
    cell.finish(30)
    assert cell.error() is not None, cell.output()
    assert "rank 0 gave up" in cell.traceback(), cell.output()
    assert "rank 1's prompt closed unanswered: rank 0 failed" in cell.stream(), cell.output()


def test_stopping_or_failing_a_launch_at_a_prompt_ends_every_rank(kernel, tmp_path):
    defined(kernel)
    defined(kernel, ON_FILE)
    in_background(kernel, "1")
    assert panel_says(kernel, "rank 1 is in the debugger")
    # Stopped from another thread while a cell waits in input() at the rank's prompt: the cell
    # returns with the launch's outcome, nothing typed.
    stop = tmp_path / "stop"
    assert kernel.execute(f"on_file({str(stop)!r}, handle.stop)", 30).error() is None
    cell = kernel.start("handle.wait(timeout=120)", store_history=True, allow_stdin=True)
    assert cell.prompt(PROMPT_WAIT) == "(Pdb rank 1) ", cell.output()
    stop.touch()
    cell.finish(30)
    assert cell.error() is not None and cell.error()["ename"] == "LaunchStoppedError", cell.output()
    closed = "rank 1's prompt closed unanswered: the launch was stopped while the prompt waited"
    assert closed in cell.stream(), cell.output()
    assert kernel.execute("handle.status", 30).result() == "'stopped'"
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()
    # Another rank fails while the cell waits at rank 1's prompt: the cell reports the failure.
    fail = tmp_path / "fail"
    in_background(kernel, repr(str(fail)), function="failing")
    cell = kernel.start("handle.wait(timeout=120)", store_history=True, allow_stdin=True)
    rank0_fails_at_rank1s_prompt(cell, fail)
    assert kernel.execute("handle.status", 30).result() == "'failed'"
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()
    # The same in a blocking launch: the launching cell itself waits in input() at rank 1's
    # prompt when rank 0 fails; it reports the failure, nothing typed.
    fail = tmp_path / "fail-blocking"
    cell = kernel.start(
        f"notebook_launcher(failing, args=({str(fail)!r},), num_processes=2)",
        store_history=True,
        allow_stdin=True,
    )
    rank0_fails_at_rank1s_prompt(cell, fail)
    assert wait_until(lambda: not kernel.workers(), 10.0), kernel.workers()
    # The kernel asks for input as before.
    asked = kernel.start("input('again? ')", allow_stdin=True)
    assert asked.prompt(30) == "again? ", asked.output()
    asked.answer("yes")
    asked.finish(30)
    assert asked.result() == "'yes'", asked.output()
