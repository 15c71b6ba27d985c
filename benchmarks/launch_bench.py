"""Launch latency and failure latency of three ways to start N gloo ranks from Python.

* ``ours``        ``notebook_launcher.notebook_launcher``
* ``accelerate``  ``accelerate.notebook_launcher`` (torch elastic underneath)
* ``bare``        ``torch.multiprocessing`` fork, N x ``Process`` + a join loop: the floor

Every launcher runs in its own long-lived subprocess (a "runner") that imports torch and its
launcher once, then launches on request, so the launchers cannot disturb each other and every
request is bounded by a timeout. The parent interleaves the requests and prints the tables.

    python benchmarks/launch_bench.py [--repeats 7] [--sizes 1,2,4,8] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

LAUNCHERS = ("ours", "accelerate", "bare")
FAIL_MESSAGE = "rank 1 fails on purpose"
STARTUP_TIMEOUT = 120.0  # seconds a runner may take to import torch and its launcher
STALL = 4.5  # seconds; a launch this slow hit a stall outside the launchers (see README)

# -- what every launcher runs (in the worker processes) --------------------------------------------


def trivial(report_dir=None):
    """Join the job, all_reduce one element, leave; optionally write what this rank saw."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # env://
    value = torch.ones(1)
    dist.all_reduce(value)
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    if report_dir:
        with open(os.path.join(report_dir, f"rank{rank}"), "w") as f:
            f.write(f"{world} {value.item()}")
    return value.item()


def partial_state():
    """The user-level job: ``PartialState()`` (which joins the group), one ``all_reduce``."""
    import torch
    import torch.distributed as dist

    from notebook_launcher import PartialState

    PartialState()
    value = torch.ones(1)
    dist.all_reduce(value)
    return value.item()


def fail_rank1(stamp_path):
    """Rank 1 raises ValueError (after writing the time it does so); the others wait in a barrier."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        with open(stamp_path, "w") as f:
            f.write(repr(time.time()))
        raise ValueError(FAIL_MESSAGE)
    dist.barrier()
    dist.destroy_process_group()


# -- the three launchers (in a runner process) ----------------------------------------------------


def launch_ours(function, args, n, port):
    from notebook_launcher import notebook_launcher

    return notebook_launcher(function, args=args, num_processes=n, use_port=port).values


def launch_accelerate(function, args, n, port):
    from accelerate import notebook_launcher

    if n > 1:
        return notebook_launcher(function, args=args, num_processes=n, use_port=str(port))
    # With num_processes=1 Accelerate starts no process: it calls function(*args) in the caller
    # and sets no environment, so the benchmark supplies the variables env:// needs.
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return notebook_launcher(function, args=args, num_processes=1, use_port=str(port))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class BareRankFailed(RuntimeError):
    """Raised by the bare floor's join loop: it only knows a rank's exit code."""

    def __init__(self, rank, exitcode):
        super().__init__(f"rank {rank} exited with code {exitcode}")
        self.rank = rank


def _bare_worker(rank, n, port, function, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(n))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    function(*args)


def launch_bare(function, args, n, port):
    """Fork N processes and wait for all; if one exits non-zero, kill the rest (fail-fast)."""
    from multiprocessing.connection import wait

    import torch.multiprocessing as mp

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_bare_worker, args=(r, n, port, function, args)) for r in range(n)]
    for p in procs:
        p.start()
    pending = {p.sentinel: (rank, p) for rank, p in enumerate(procs)}
    failed = None
    while pending:
        for sentinel in wait(list(pending)):
            rank, p = pending.pop(sentinel)
            p.join()
            if p.exitcode != 0 and failed is None:
                failed = BareRankFailed(rank, p.exitcode)
                for _, other in pending.values():
                    other.kill()
    if failed is not None:
        raise failed


LAUNCH = {"ours": launch_ours, "accelerate": launch_accelerate, "bare": launch_bare}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def blamed_rank(exc):
    failure = getattr(exc, "launch_failure", None) or getattr(exc, "failure", None)
    if failure is not None:  # ours: the original exception carries launch_failure
        return failure.rank
    if hasattr(exc, "get_first_failure"):  # torch elastic's ChildFailedError
        return exc.get_first_failure()[0]
    return getattr(exc, "rank", None)


def handle(launcher, request):
    """One request in a runner: a timed launch of ``trivial`` or of ``fail_rank1``."""
    launch, n, port = LAUNCH[launcher], request["n"], free_port()
    if request["op"] == "launch":
        start = time.perf_counter()
        launch(trivial, (request.get("report_dir"),), n, port)
        return {"seconds": time.perf_counter() - start}
    stamp = request["stamp"]
    try:
        launch(fail_rank1, (stamp,), n, port)
    except BaseException as exc:  # noqa: B036 - whatever reaches the caller is the measurement
        caught = time.time()
        with open(stamp) as f:
            raised = float(f.read())
        return {
            "seconds": caught - raised,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "original_message": FAIL_MESSAGE in str(exc),
            "blamed_rank": blamed_rank(exc),
        }
    return {"error": "the launch did not raise"}


def serve(launcher):
    """Runner main loop: JSON requests on stdin, JSON replies on the original stdout."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # launcher chatter must not mix with replies
    import torch.distributed  # noqa: F401 - imported up front, as a notebook would have it

    if launcher == "ours":
        pass
    elif launcher == "accelerate":
        import accelerate  # noqa: F401
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            return
        try:
            reply = handle(launcher, request)
        except BaseException as exc:  # noqa: B036
            reply = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        replies.write(json.dumps(reply) + "\n")


# -- the parent: runners, schedule, tables ---------------------------------------------------------


class Runner:
    """A subprocess that owns one launcher; every request has a deadline."""

    def __init__(self, launcher, workdir, timeout):
        self.launcher, self.timeout = launcher, timeout
        self.log_path = os.path.join(workdir, f"{launcher}.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--runner", launcher],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
                env=dict(os.environ, TMPDIR=workdir),  # torch elastic leaves a dir per launch
            )
        self.dead, self.hung = None, False
        self._reply(max(timeout, STARTUP_TIMEOUT))  # imports

    def ask(self, **request):
        if self.dead:
            return {"error": self.dead}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply(self.timeout)

    def _reply(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        self.dead = f"no reply within {timeout:g} s" if not ready else "runner died"
        if not ready:
            self.hung = True
            self.dead += f"; where its processes wait (kernel wchan): {self.wchans()}"
        self.kill()
        return {"error": self.dead}

    def wchans(self):
        """What each process of the runner's tree is blocked in, to tell a deadlock from a wait."""
        import psutil

        found = []
        try:
            family = [psutil.Process(self.proc.pid)]
            family += family[0].children(recursive=True)
        except psutil.Error:
            return "?"
        for proc in family:
            try:
                with open(f"/proc/{proc.pid}/wchan") as f:
                    found.append(f"{proc.pid}:{f.read().strip() or '-'}")
            except OSError:
                pass
        return " ".join(found)

    def close(self):
        if self.proc.poll() is None and not self.dead:
            try:
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self):
        """SIGKILL the runner and everything it started (its own group and any descendant)."""
        import psutil

        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        for proc in family:
            try:
                proc.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def log_tail(self, lines=15):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


def check_ranks(report_dir, n):
    """True if n ranks reported a world of n and an all_reduce sum of n."""
    seen = sorted(os.listdir(report_dir))
    expected = sorted(f"rank{r}" for r in range(n))
    if seen != expected:
        return False
    for name in seen:
        with open(os.path.join(report_dir, name)) as f:
            world, value = f.read().split()
        if int(world) != n or float(value) != n:
            return False
    return True


def run(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {
        "sizes": sizes,
        "repeats": args.repeats,
        "cold": {},
        "verified": {},
        "launch": {name: {str(n): [] for n in sizes} for name in LAUNCHERS},
        "failure": {name: [] for name in LAUNCHERS},
        "hung": {name: 0 for name in LAUNCHERS},
        "errors": [],
    }
    with tempfile.TemporaryDirectory(prefix="launch_bench-") as workdir:
        runners = {}
        try:
            for name in LAUNCHERS:
                runners[name] = Runner(name, workdir, args.timeout)

            def ask(name, **request):
                reply = runners[name].ask(**request)
                if "error" in reply:
                    results["errors"].append(f"{name} {request}: {reply['error']}")
                    print(f"  ! {name} n={request.get('n')}: {reply['error']}", file=sys.stderr)
                if runners[name].dead:  # hung or crashed: start a fresh, warmed-up runner
                    results["hung"][name] += runners[name].hung
                    print(runners[name].log_tail(), file=sys.stderr)
                    runners[name] = Runner(name, workdir, args.timeout)
                    runners[name].ask(op="launch", n=2)
                return reply

            def report_dir(name, n, tag):
                path = os.path.join(workdir, f"{tag}-{name}-{n}")
                os.mkdir(path)
                return path

            # The first launch of each runner is its cold launch; it also checks the ranks joined.
            cold_n = 2 if 2 in sizes else sizes[0]
            for name in LAUNCHERS:
                path = report_dir(name, cold_n, "cold")
                reply = ask(name, op="launch", n=cold_n, report_dir=path)
                results["cold"][name] = {"n": cold_n, "seconds": reply.get("seconds")}
            # One untimed warm-up per (launcher, N), checking N connected ranks.
            for n in sizes:
                for name in LAUNCHERS:
                    path = report_dir(name, n, "check")
                    ok = "error" not in ask(name, op="launch", n=n, report_dir=path)
                    results["verified"][f"{name}/{n}"] = ok and check_ranks(path, n)
            print("launch latency ...", file=sys.stderr, flush=True)
            for rep in range(args.repeats):
                order = LAUNCHERS[rep % 3 :] + LAUNCHERS[: rep % 3]  # rotate who goes first
                for n in sizes:
                    for name in order:
                        reply = ask(name, op="launch", n=n)
                        if "seconds" in reply:
                            results["launch"][name][str(n)].append(reply["seconds"])
            print("failure latency ...", file=sys.stderr, flush=True)
            for rep in range(args.repeats):
                order = LAUNCHERS[rep % 3 :] + LAUNCHERS[: rep % 3]
                for name in order:
                    stamp = os.path.join(workdir, f"stamp-{name}-{rep}")
                    reply = ask(name, op="fail", n=2, stamp=stamp)
                    if "seconds" in reply:
                        results["failure"][name].append(reply)
        finally:
            for runner in runners.values():
                runner.close()
            for name, runner in runners.items():
                if any(e.startswith(name) for e in results["errors"]):
                    print(f"--- last lines of the {name} runner's stderr:", file=sys.stderr)
                    print(runner.log_tail(), file=sys.stderr)
    return results


# -- tables -----------------------------------------------------------------------------------------


def summarize(samples):
    if not samples:
        return None
    return {"median": statistics.median(samples), "min": min(samples), "n": len(samples)}


def fmt(stat):
    return "   failed" if stat is None else f"{stat['median']:.3f} ({stat['min']:.3f})"


def ratio(a, b):
    return "  -" if a is None or b is None else f"{a['median'] / b['median']:.2f}x"


def print_tables(results):
    print(f"\nLaunch latency, seconds: median (min) of {results['repeats']} launches")
    header = f"{'N':>3} | {'ours':>15} | {'accelerate':>15} | {'bare torch':>15} |"
    print(header + " ours/bare | accelerate/bare")
    print("-" * (len(header) + 28))
    for n in results["sizes"]:
        stats = {name: summarize(results["launch"][name][str(n)]) for name in LAUNCHERS}
        mark = "*" if n == 1 else " "
        cells = " | ".join(
            f"{fmt(stats[name])}{mark if name == 'accelerate' else ' '}".rjust(15)
            for name in LAUNCHERS
        )
        print(
            f"{n:>3} | {cells} | {ratio(stats['ours'], stats['bare']):>9} |"
            f" {ratio(stats['accelerate'], stats['bare']):>15}"
        )
    if 1 in results["sizes"]:
        print("  * accelerate runs N=1 in the calling process: no process is started")
    cold = ", ".join(
        f"{name} {c['seconds']:.3f}" if c["seconds"] is not None else f"{name} failed"
        for name, c in results["cold"].items()
    )
    cold_n = next(iter(results["cold"].values()))["n"]
    print(f"First (cold) launch, N={cold_n}, seconds: {cold}")
    slow = {
        name: sum(x >= STALL for xs in results["launch"][name].values() for x in xs)
        for name in LAUNCHERS
    }
    counts = ", ".join(f"{name} {k}" for name, k in slow.items())
    print(f"Launches that took >= {STALL:g} s (5-s resolver stalls, see README): {counts}")
    hung = ", ".join(f"{name} {k}" for name, k in results["hung"].items())
    print(f"Launches killed after --timeout (hung, see README): {hung}")
    bad = [key for key, ok in results["verified"].items() if not ok]
    print("All launches checked: N ranks joined one job" if not bad else f"NOT verified: {bad}")

    print(f"\nFailure latency, N=2, rank 1 raises ValueError: {results['repeats']} launches")
    print(f"{'launcher':>10} | {'median s':>8} | {'min s':>6} | {'max s':>6} | caller got")
    print("-" * 78)
    for name in LAUNCHERS:
        replies = results["failure"][name]
        stat = summarize([r["seconds"] for r in replies])
        if stat is None:
            print(f"{name:>10} | failed")
            continue
        last = replies[-1]
        kinds = {r["type"] for r in replies}
        blamed = collections.Counter(r["blamed_rank"] for r in replies)
        blamed = ", ".join(f"{rank} x{k}" for rank, k in sorted(blamed.items(), key=str))
        kept = sum(r["original_message"] for r in replies)
        print(
            f"{name:>10} | {stat['median']:8.3f} | {stat['min']:6.3f} | "
            f"{max(r['seconds'] for r in replies):6.3f} | "
            f"{' / '.join(sorted(kinds)) if len(kinds) > 1 else last['type']}, "
            f"message kept {kept}/{len(replies)}, blamed rank {blamed}"
        )
    print("  bare: time until both processes ended (hand-written fail-fast join loop)")
    for error in results["errors"]:
        print(f"error: {error}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default="1,2,4,8", help="comma-separated process counts")
    parser.add_argument("--json", help="also write every sample to this file")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds allowed per launch")
    parser.add_argument("--runner", choices=LAUNCHERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runner:
        serve(args.runner)
        return
    results = run(args)
    for name in LAUNCHERS:
        for n in results["sizes"]:
            results.setdefault("summary", {})[f"{name}/{n}"] = summarize(
                results["launch"][name][str(n)]
            )
        failures = [r["seconds"] for r in results["failure"][name]]
        results["summary"][f"{name}/failure"] = summarize(failures)
    print_tables(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
