"""Sessions holding a real model through failures inside collectives, many times over.

For each framework (plain torch DDP over gloo, our Accelerator, Accelerate's Accelerator and
Lightning Fabric) one session of 2 processes wraps a model once. Then, ``--trials`` times for each
place (DDP's gradient all-reduce in backward, an explicit ``all_reduce``) and each way of failing
(rank 1 raises; the cell is interrupted while rank 1 sleeps), rank 0 is left waiting inside the
collective and the call fails. After every failure the same model object takes a training step,
and its weights are compared across the ranks.

    python benchmarks/session_trust_bench.py                 # 20 trials of each, ~10 min here
    python benchmarks/session_trust_bench.py --trials 3 --frameworks torch --json out.json

Reported per framework, place and way: broken sessions (the goal is 0), calls after which the
model did not train on or the ranks' weights differed, and two times: "error" is wall-clock
seconds from the raise (rank 1 notes ``time.time()`` just before it) or from the SIGINT to the
exception in the caller; "released" is from the raise or the SIGINT to the moment rank 0's
collective gave up (rank 0 notes the time in an ``except`` around it); the goal is within 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_session_collectives import COMMON, FRAMEWORKS  # noqa: E402

from notebook_launcher import Session  # noqa: E402

STEP = """
released = None
def step(fail=None, where="backward"):
    global released, raised
    loss = model(torch.randn(16, 8)).pow(2).mean()
    if rank == 1 and fail == "raise":
        time.sleep(0.3)  # rank 0 is inside the collective by now
        raised = time.time()
        raise ValueError("a shape bug on rank 1")
    if rank == 1 and fail == "hang":
        time.sleep(60)
    try:
        if where == "backward":
            backward(loss)
        else:
            dist.all_reduce(torch.ones(1))
    except BaseException:
        released = time.time()
        raise
    opt.step()
    opt.zero_grad()
    return loss.item()
"""
INTERRUPT_AFTER = 0.5  # seconds into the call


def trial(session: Session, where: str, how: str, model_ids: list[int]) -> dict:
    session.exec("released = raised = None")
    timer = None
    sent = [0.0]
    if how == "interrupt":

        def interrupt() -> None:
            sent[0] = time.time()
            os.kill(os.getpid(), signal.SIGINT)

        timer = threading.Timer(INTERRUPT_AFTER, interrupt)
        timer.start()
    fail = "raise" if how == "raise" else "hang"
    caught = None
    try:
        session.exec(f"step(fail={fail!r}, where={where!r})")
    except BaseException as error:  # noqa: BLE001 - measured, not judged here
        caught = time.time()
        kind = type(error).__name__
    finally:
        if timer is not None:
            timer.join()
    record = {"where": where, "how": how, "error": kind if caught else None}
    if session.state != "alive":
        record["broken"] = True
        return record
    record["broken"] = False
    released = session.exec("released").values[0]
    start = session.exec("raised").values[1] if how == "raise" else sent[0]
    record["error_s"] = caught - start if caught and start else None
    record["released_s"] = released - start if released and start else None
    try:
        same = session.exec("id(model)").values == model_ids
        session.exec("step()")
        weights = session.exec("[p.detach().clone() for p in model.parameters()]").values
        record["trained_on"] = same and all(
            torch.equal(a, b) for a, b in zip(*weights, strict=True)
        )
    except Exception as error:  # noqa: BLE001
        record["trained_on"] = False
        record["problem"] = f"{type(error).__name__}: {error}"
    return record


def run(framework: str, trials: int) -> list[dict]:
    records = []
    session = Session(num_processes=2, ui="none", stop_grace=5.0)
    try:
        session.exec(COMMON + FRAMEWORKS[framework] + STEP)
        session.exec("step()")
        model_ids = session.exec("id(model)").values
        for _ in range(trials):
            for where in ("backward", "all_reduce"):
                for how in ("raise", "interrupt"):
                    if session.state != "alive":
                        session.restart()
                        session.exec(COMMON + FRAMEWORKS[framework] + STEP)
                        model_ids = session.exec("id(model)").values
                    records.append(
                        {"framework": framework, **trial(session, where, how, model_ids)}
                    )
    finally:
        session.close()
    return records


def summary(records: list[dict]) -> list[str]:
    lines = [
        "| framework | place | way | trials | broken | not trained on | error s (median, max) | "
        "released s (median, max) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = sorted({(r["framework"], r["where"], r["how"]) for r in records}, key=str)
    for framework, where, how in keys:
        group = [
            r for r in records if (r["framework"], r["where"], r["how"]) == (framework, where, how)
        ]

        def stat(name: str, group=group) -> str:
            values = [r[name] for r in group if r.get(name) is not None]
            if not values:
                return "-"
            return f"{statistics.median(values):.3f}, {max(values):.3f}"

        broken = sum(r["broken"] for r in group)
        stale = sum(not r.get("trained_on", False) for r in group if not r["broken"])
        lines.append(
            f"| {framework} | {where} | {how} | {len(group)} | {broken} | {stale} | "
            f"{stat('error_s')} | {stat('released_s')} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    records = []
    for framework in options.frameworks.split(","):
        started = time.monotonic()
        records += run(framework, options.trials)
        print(f"{framework}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print("\n".join(summary(records)))
    if options.json:
        options.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
