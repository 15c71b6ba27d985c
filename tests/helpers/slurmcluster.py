"""A real two-node Slurm cluster on this machine, bound to 127.0.0.1 only: munged, slurmctld and two
slurmd (nodes ``n1`` and ``n2``), each daemon in the foreground as a child of the caller, with its
configuration, state, spool, sockets and logs in one temporary folder, stopped by PID.

Clients find it through ``SLURM_CONF`` (set in this process's environment while it runs, so that
``srun``, ``sbatch``, ``squeue`` ... started from here, and the ranks they start, talk to it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
NODES = ("n1", "n2")
CPUS_PER_NODE = 4  # more than this machine has: slurmd is told to take the configuration's word
PARTITION = "debug"
START_LIMIT = 60.0  # seconds the nodes get to show as idle
STOP_LIMIT = 10.0  # seconds a daemon gets to end on SIGTERM before SIGKILL
DAEMONS = ("munged", "slurmctld", "slurmd")
NO_SLURM = (
    "Slurm is not installed (apt-get install slurm-wlm munge, as root; ./dev test installs them)"
)


def missing() -> str | None:
    """Why the lane cannot run here (a daemon or client not on PATH), or None."""
    for name in (*DAEMONS, "srun", "sbatch", "squeue", "scancel", "sinfo", "scontrol"):
        if shutil.which(name) is None and not Path("/usr/sbin", name).exists():
            return f"{NO_SLURM}: {name} not found"
    if os.geteuid() != 0:
        return "the local Slurm lane runs its daemons as root (SlurmUser=root)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class LocalSlurm:
    """The running cluster: its folder, configuration, environment and daemons."""

    root: Path
    conf: Path
    env: dict[str, str]
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def pids(self) -> set[int]:
        return {proc.pid for proc in self.daemons.values()}

    def run(self, *args: str, timeout: float = 30.0, check: bool = True) -> str:
        """A Slurm client command against this cluster; its stdout."""
        done = subprocess.run(
            args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def jobs(self) -> list[str]:
        """The jobs the cluster still holds (any state but finished): ``"id state name"``."""
        out = self.run("squeue", "-h", "-o", "%i %T %j", check=False)
        return [line.strip() for line in out.splitlines() if line.strip()]

    def steps(self) -> list[str]:
        out = self.run("squeue", "-h", "-s", "-o", "%i %j", check=False)
        return [line.strip() for line in out.splitlines() if line.strip()]

    def wait_idle(self, limit: float = START_LIMIT) -> None:
        """Until every node is idle (resumed after a test took one down), bounded."""
        deadline = time.monotonic() + limit
        while True:
            states = self.node_states()
            if len(states) == len(NODES) and all(s.rstrip("*") == "idle" for s in states.values()):
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"nodes not idle within {limit:g} s: {states}\n{self.logs()}")
            time.sleep(0.2)

    def wait_no_jobs(self, limit: float = 30.0) -> list[str]:
        """Wait (bounded) until squeue is empty; what it still shows then."""
        deadline = time.monotonic() + limit
        while (left := self.jobs()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def start_slurmd(self, node: str) -> None:
        """Start (or restart, after a test killed it) the slurmd of ``node``."""
        old = self.daemons.get(node)
        if old is not None and old.poll() is None:
            return
        self.daemons[node] = _start(
            [_binary("slurmd"), "-D", "-f", str(self.conf), "-N", node], self.root, f"slurmd-{node}"
        )

    def kill_slurmd(self, node: str) -> None:
        """Kill ``node``'s slurmd at once (a node lost): its tasks lose their daemon."""
        proc = self.daemons[node]
        proc.kill()
        proc.wait(STOP_LIMIT)

    def resume(self, node: str) -> None:
        """Bring ``node`` back after it was lost: its slurmd restarted, the node resumed."""
        self.start_slurmd(node)
        self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel what is left, then stop every daemon this cluster started (by PID)."""
        if self.daemons.get("slurmctld") is not None:
            self.run("scancel", "--full", "-u", "root", check=False)
        for name in [n for n in self.daemons if n != "munged"] + ["munged"]:
            proc = self.daemons.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_LIMIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_LIMIT)
        self.daemons.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def _start(args: list[str], root: Path, name: str) -> subprocess.Popen:
    out = open(root / f"{name}.out", "wb")  # noqa: SIM115 - the daemon keeps it
    try:
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=root
        )
    finally:
        out.close()


def _config(root: Path, host: str, ports: dict[str, int], munge_socket: Path) -> str:
    lines = [
        "ClusterName=nl",
        f"SlurmctldHost={host}({LOOPBACK})",
        f"SlurmctldPort={ports['slurmctld']}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "JobAcctGatherType=jobacct_gather/linux",
        "JobAcctGatherFrequency=task=1",
        "JobAcctGatherParams=OverMemoryKill",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "SlurmdTimeout=10",
        "SlurmctldTimeout=20",
        "MessageTimeout=10",
        "InactiveLimit=0",
        "KillWait=2",
        "MinJobAge=2",
        "OverTimeLimit=0",
        "SchedulerParameters=sched_interval=2",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd'}-%n.pid",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd'}-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
    ]
    for node in NODES:
        lines.append(
            f"NodeName={node} NodeHostname={host} NodeAddr={LOOPBACK} Port={ports[node]} "
            f"CPUs={CPUS_PER_NODE} RealMemory=2000 State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def start(limit: float = START_LIMIT) -> LocalSlurm:
    """Start the cluster and wait (bounded) until both nodes are idle; stop it with
    :meth:`LocalSlurm.stop`. ``SLURM_CONF`` is set in this process's environment meanwhile."""
    reason = missing()
    if reason is not None:
        raise RuntimeError(reason)
    root = Path(tempfile.mkdtemp(prefix="nl-slurm-"))
    os.chmod(root, 0o755)
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    os.chmod(root / "munge", 0o700)
    munge_socket = root / "munge" / "munge.socket"
    host = socket.gethostname().split(".")[0]
    ports = {name: _free_port() for name in ("slurmctld", *NODES)}
    conf = root / "slurm.conf"
    conf.write_text(_config(root, host, ports, munge_socket))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for name in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))]:
        if name != "SLURM_CONF":
            del env[name]
    cluster = LocalSlurm(root=root, conf=conf, env=env)
    try:
        cluster.daemons["munged"] = _start(
            [
                _binary("munged"),
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={munge_socket}",
                f"--pid-file={root / 'munge' / 'munged.pid'}",
                f"--log-file={root / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ],
            root,
            "munged",
        )
        deadline = time.monotonic() + limit
        while not munge_socket.exists():
            if time.monotonic() >= deadline or cluster.daemons["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start\n{cluster.logs()}")
            time.sleep(0.05)
        cluster.daemons["slurmctld"] = _start(
            [_binary("slurmctld"), "-D", "-i", "-f", str(conf)], root, "slurmctld"
        )
        for node in NODES:
            cluster.start_slurmd(node)
        os.environ["SLURM_CONF"] = str(conf)
        cluster.wait_idle(max(1.0, deadline - time.monotonic()))
    except BaseException:
        cluster.stop()
        os.environ.pop("SLURM_CONF", None)
        raise
    return cluster
