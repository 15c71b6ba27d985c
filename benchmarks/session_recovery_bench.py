"""How soon a session notices what went wrong, and what it costs to go on: a rank that raises while
the other waits in a collective, an interrupt, a rank killed in a collective and one killed
between calls, and the first call after each.

    python benchmarks/session_recovery_bench.py               # 5 trials a scenario, N = 2
    python benchmarks/session_recovery_bench.py --trials 10 --json out.json

Each time is wall-clock seconds from the event (a rank writes ``time.time()`` to a file just
before it raises or is killed; the benchmark notes the time it sends SIGINT or SIGKILL) to the
moment the caller holds the exception, or sees ``session.state == "broken"`` for a death between
calls. "next call" is the first ``session.run`` after recovery (restart included for deaths).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from notebook_launcher import PartialState, Session, SessionBrokenError


def _mark(folder: str) -> None:
    Path(folder, f"at-{PartialState().process_index}").write_text(repr(time.time()))


def _marked(folder: str) -> float:
    return max(float(p.read_text()) for p in Path(folder).glob("at-*"))


def raise_while_peer_waits(folder: str) -> None:
    if PartialState().process_index == 1:
        _mark(folder)
        raise ValueError("bad batch")
    dist.barrier()


def sleep_while_peer_waits() -> None:
    if PartialState().process_index == 1:
        time.sleep(3600)
    dist.barrier()


def killed_while_peer_waits(folder: str) -> None:
    if PartialState().process_index == 1:
        time.sleep(0.2)
        _mark(folder)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def all_reduce() -> float:
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    return tensor.item()


def _next_call(session: Session) -> float:
    started = time.perf_counter()
    assert session.run(all_reduce).values == [2.0] * session.num_processes
    return time.perf_counter() - started


def trial(session: Session, scenario: str) -> tuple[float, float]:
    """(seconds to notice, seconds of the next call) for one run of ``scenario``."""
    with tempfile.TemporaryDirectory() as folder:
        if scenario == "raise":
            try:
                session.run(raise_while_peer_waits, folder)
            except ValueError:
                noticed = time.time() - _marked(folder)
            return noticed, _next_call(session)
        if scenario == "interrupt":
            sent: list[float] = []

            def interrupt() -> None:
                sent.append(time.time())
                os.kill(os.getpid(), signal.SIGINT)

            timer = threading.Timer(0.5, interrupt)
            timer.start()
            try:
                session.run(sleep_while_peer_waits)
            except KeyboardInterrupt:
                noticed = time.time() - sent[0]
            timer.join()
            return noticed, _next_call(session)
        if scenario == "killed-in-collective":
            try:
                session.run(killed_while_peer_waits, folder)
            except SessionBrokenError:
                noticed = time.time() - _marked(folder)
            restarted = time.perf_counter()
            session.restart()
            return noticed, time.perf_counter() - restarted + _next_call(session)
        if scenario == "killed-between-calls":
            victim = psutil.Process().children()[-1]
            killed = time.time()
            victim.kill()
            while session.state == "alive" and time.time() - killed < 10:
                time.sleep(0.005)
            noticed = time.time() - killed
            restarted = time.perf_counter()
            session.restart()
            return noticed, time.perf_counter() - restarted + _next_call(session)
    raise ValueError(scenario)


SCENARIOS = ("raise", "interrupt", "killed-in-collective", "killed-between-calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", help="write every sample to this file")
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {s: [] for s in SCENARIOS}
    with Session(num_processes=args.processes, ui="none", stall_notice=None) as session:
        _next_call(session)
        for _ in range(args.trials):
            for scenario in SCENARIOS:
                samples[scenario].append(trial(session, scenario))
    print(f"session recovery, N = {args.processes}, {args.trials} trials (seconds)")
    print(f"{'scenario':<24} {'noticed: median':>16} {'range':>16} {'next call: median':>18}")
    for scenario, values in samples.items():
        noticed = [v[0] for v in values]
        after = [v[1] for v in values]
        print(
            f"{scenario:<24} {statistics.median(noticed):>16.3f} "
            f"{min(noticed):>7.3f}–{max(noticed):<8.3f} {statistics.median(after):>18.3f}"
        )
    print("(killed-*: the next call includes restart(), which starts new workers)")
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=1))


if __name__ == "__main__":
    main()
