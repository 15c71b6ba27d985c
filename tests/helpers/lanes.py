"""What the multi-node lanes (tests/ray, tests/slurm) share: the lane's own timeout on its tests
and its last test told, the DDP loop their ranks train, a session's stop button and a rank dying
between its calls, and the config panel's run followed to its end."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from notebook_launcher import PartialState, SessionBrokenError, log

BROKEN_WITHIN = 30.0  # seconds a session may take to see that a rank of it died
FINISHED_WITHIN = 30.0  # seconds a panel may take to say its run finished, once it returned


def mark_lane(items: list, folder: Path, seconds: float) -> None:
    """Give each collected test in ``folder`` the lane's timeout, ``seconds``."""
    for item in items:
        if folder in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(seconds))


def lane_ends(nextitem, folder: Path) -> bool:
    """Whether the test torn down now is the last of ``folder``'s in this run (the next one
    lives elsewhere, or there is none)."""
    return nextitem is None or Path(str(nextitem.path)).resolve().parent != folder


def train_ddp_steps(steps: int) -> tuple[PartialState, torch.nn.Module]:
    """On a rank: a linear model trained ``steps`` DDP steps on the rank's own data, its loss
    logged at each; says it trained. The rank's state and its model. Shipped to the ranks by value
    (``cloudpickle.register_pickle_by_value`` on this module)."""
    state = PartialState()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(state.process_index)
    for step in range(steps):
        x = torch.randn(8, 4, generator=data)
        loss = ((ddp(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log({"loss": loss.item()}, step=step)
    print(f"rank {state.process_index} trained", flush=True)
    return state, model


def interrupted_call(session) -> None:
    """A call that sleeps, stopped by the stop button (SIGINT to this kernel) after 1 s: it
    raises KeyboardInterrupt."""
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))  # the stop button
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            session.exec("import time\ntime.sleep(60)")
    finally:
        timer.join()


def warm_call_median(session, code: str, calls: int) -> float:
    """The median seconds of ``calls`` warm calls of ``code``."""
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        session.exec(code)
        took.append(time.perf_counter() - started)
    return sorted(took)[calls // 2]


def killed_rank_breaks(session, pid: int, code: str) -> None:
    """A rank's process (``pid``) SIGKILLed between calls breaks the session; its next call
    (``code``) raises SessionBrokenError."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + BROKEN_WITHIN
    while session.state == "alive" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session.state == "broken"
    with pytest.raises(SessionBrokenError):
        session.exec(code)


def panel_run(panel, limit: float) -> tuple:
    """The config panel's Launch clicked: its run's handle and values (within ``limit``
    seconds), once the panel said the run finished and can launch again."""
    panel.launch_button.click()
    handle = panel.handle
    assert handle is not None and panel.runs.children == (handle.view.widget,)
    values = handle.wait(limit).values
    deadline = time.monotonic() + FINISHED_WITHIN
    while "finished in" not in panel.message.value:
        assert time.monotonic() < deadline, panel.message.value
        time.sleep(0.05)
    assert not panel.launch_button.disabled and panel.stop_button.disabled
    return handle, values
