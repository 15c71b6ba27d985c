"""A rank started by Slurm (one task of the launch's job step): joins the kernel named in its
environment, receives what to run, and runs it as a rank on any cluster does
(:func:`.remote_rank.run_worker`). Run as ``python -m notebook_launcher.worker.slurm_rank``."""

from __future__ import annotations

import os
import signal
import sys

from ..protocol import rank_start, remote_link
from ..protocol.node_environment import describe_node, to_json
from .remote_rank import run_worker

NOT_STARTED = 2  # the exit code of a task that could not join the kernel
NODE_LACKS = 3  # the exit code of a task whose node cannot run the launch
GO_WITHIN = 120.0  # seconds a task waits for the kernel's go once it said what its node has


def main() -> int:
    """Join the kernel and run this task's rank; the exit code a worker process has."""
    try:
        host, _, port = os.environ[rank_start.KERNEL_ENV].rpartition(":")
        secret = bytes.fromhex(os.environ.pop(rank_start.SECRET_ENV))
        attempt = int(os.environ[rank_start.ATTEMPT_ENV])
        rank = int(os.environ["SLURM_PROCID"])
    except (KeyError, ValueError) as error:
        print(
            f"notebook_launcher: this task was not started by a launch ({error})", file=sys.stderr
        )
        return NOT_STARTED
    try:
        sock = remote_link.join_kernel((host.strip("[]"), int(port)), secret, attempt, rank)
        first = remote_link.framed(sock.dup())  # reads exactly one message, then lets go
        try:
            spec, payload, store, node, modules = rank_start.unpack(first.recv_bytes())
            # What this node lacks is the kernel's to name: the function loads only on its go.
            first.send_bytes(remote_link.NODE + to_json(describe_node(modules)))
            if not first.poll(GO_WITHIN) or first.recv_bytes() != remote_link.GO:
                return NODE_LACKS  # the kernel names what this node lacks, and ends the step
        finally:
            first.close()
    except (OSError, EOFError, ValueError) as error:
        print(
            f"notebook_launcher: rank {rank} could not join the kernel at {host}:{port}: {error}",
            file=sys.stderr,
        )
        return NOT_STARTED
    _warn_before_the_limit(rank, os.environ.get(rank_start.WARNING_ENV, "?"))
    return run_worker(spec, payload, None, b"", store, node, sock=sock, large=None)


def _warn_before_the_limit(rank: int, seconds: str) -> None:
    """Slurm's warning before the job's time limit (``--signal``): rank 0 says it in the cell;
    no rank dies of it (the signal's default action)."""

    def warn(signum: int, frame: object) -> None:
        if rank == 0:
            text = (
                f"notebook_launcher: Slurm warns that the job reaches its time limit in about "
                f"{seconds} s; save what you need now\n"
            )
            os.write(2, text.encode())

    signal.signal(getattr(signal, f"SIG{rank_start.TIME_WARNING_SIGNAL}"), warn)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The rank has said everything: end at once, without the interpreter's slow teardown (the
    # kernel learns the rank's end from srun, which reports it once this process is gone).
    os._exit(code)
