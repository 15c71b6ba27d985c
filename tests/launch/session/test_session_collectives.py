"""Sessions holding real models through failures inside collectives.

Each framework's model is wrapped once, in a session of two real processes over gloo. Then one
rank raises, or the cell is interrupted, while the other rank waits inside a collective (DDP's
gradient all-reduce in backward, or an explicit ``all_reduce``). Every time: the call's error
comes back, the session stays alive with both namespaces, and the same model object trains on,
its weights equal on both ranks.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
import torch

from notebook_launcher import Session

COMMON = """
import time
import torch
import torch.distributed as dist
from notebook_launcher import PartialState
rank = PartialState().process_index
torch.manual_seed(0)
"""

ACCELERATOR = """
acc = Accelerator(cpu=True)
model = acc.prepare(torch.nn.Linear(8, 4))
opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.01))
backward = acc.backward
"""

FRAMEWORKS = {
    "torch": """
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
backward = lambda loss: loss.backward()
""",
    "notebook_launcher": "from notebook_launcher import Accelerator\n" + ACCELERATOR,
    "accelerate": "from accelerate import Accelerator\n" + ACCELERATOR,
    "lightning": """
from lightning.fabric import Fabric
fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
fabric.launch()
net = torch.nn.Linear(8, 4)
model, opt = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.01))
backward = fabric.backward
""",
}

STEP = """
def step(fail=None, where="backward"):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    if rank == 1 and fail == "raise":
        time.sleep(0.3)  # the other rank is inside the collective by now
        raise ValueError("a shape bug on rank 1")
    if rank == 1 and fail == "hang":
        time.sleep(60)
    if where == "backward":
        backward(loss)
    else:
        t = torch.ones(1)
        dist.all_reduce(t)
    opt.step()
    opt.zero_grad()
    return loss.item()
"""


def _same_model_trains_on(session: Session, model_ids: list[int]) -> None:
    assert session.state == "alive"
    assert session.exec("id(model)").values == model_ids  # the same object on each rank
    for _ in range(2):
        session.exec("step()")
    weights = session.exec("[p.detach().clone() for p in model.parameters()]").values
    for other in weights[1:]:  # every rank's copy equals rank 0's
        assert all(torch.equal(a, b) for a, b in zip(weights[0], other, strict=True))


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_failures_inside_collectives_leave_the_session_and_its_model_usable(framework):
    with Session(num_processes=2, ui="none", stop_grace=5.0) as session:
        session.exec(COMMON + FRAMEWORKS[framework] + STEP)
        session.exec("step()")
        model_ids = session.exec("id(model)").values
        for where in ("backward", "all_reduce"):
            for _trial in range(2):
                with pytest.raises(ValueError, match="shape bug on rank 1") as info:
                    session.exec(f"step(fail='raise', where={where!r})")
                notes = "\n".join(info.value.__notes__)
                assert "still usable" in notes, notes
                _same_model_trains_on(session, model_ids)

                timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
                timer.start()
                try:
                    with pytest.raises(KeyboardInterrupt, match="still usable"):
                        session.exec(f"step(fail='hang', where={where!r})")
                finally:
                    timer.cancel()
                _same_model_trains_on(session, model_ids)
