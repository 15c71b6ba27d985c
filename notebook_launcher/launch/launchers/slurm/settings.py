"""Where a launch runs on Slurm: :class:`SlurmCluster`, the settings of a launch whose ranks are a
Slurm job step (``cluster="slurm"`` or ``cluster=SlurmCluster(...)``), checked before anything is
queued. Plain data: nothing here runs a Slurm command."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass

from ....utils.validation import check_int_in, check_seconds, invalid, short_repr

CLUSTER_NAMES = ("slurm",)
# The launch settings of the hand-run multi-node path that mean nothing on Slurm.
NOT_ON_SLURM = (
    ("num_nodes", 1, "SlurmCluster(nodes=...) says how many nodes"),
    ("node_rank", 0, "every rank is started from this kernel"),
    ("master_addr", "127.0.0.1", "this kernel hosts the job's rendezvous"),
    ("rdzv_backend", "static", "this kernel hosts the job's rendezvous"),
    ("rdzv_endpoint", "", "this kernel hosts the job's rendezvous"),
    ("start_method", "fork", "each rank is a task of a Slurm job step"),
)
_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^\d+-\d+$")  # Slurm's time formats
_MEM = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_WORD = re.compile(r"^[\w.,:|&*()\[\]!@+-]+$")  # a partition, account, QoS or constraint


@dataclass(frozen=True)
class SlurmCluster:
    """Run the ranks of a launch or session as one Slurm job step, one task per rank.

    ``notebook_launcher(train, args, num_processes=4, cluster="slurm")`` is the same as passing
    ``cluster=SlurmCluster()``. In a notebook that already runs inside an allocation
    (``SLURM_JOB_ID`` set, as under batchspawner or Open OnDemand), the ranks start there with
    ``srun``; outside one, a job is submitted with ``sbatch`` (the options below) and the ranks
    start in it once it runs. Each rank connects back to this kernel over one authenticated
    socket; the job is cancelled when the launch (or the session) ends.

    Args:
        partition, account, qos, constraint: as ``sbatch --partition`` ... (None: Slurm's default).
        nodes: nodes to run on (None: 1, or as many as ``num_processes / tasks_per_node``).
        tasks_per_node: ranks per node (None: ``num_processes / nodes``).
        gpus_per_node: GPUs per node (each rank then drives one: ``tasks_per_node`` at most this).
        cpus_per_task: CPUs of each rank (its torch threads).
        mem: memory per node, as ``sbatch --mem`` takes it ("16G").
        time: the job's time limit, as ``sbatch --time`` takes it ("1:00:00").
        time_warning: seconds before the time limit at which Slurm warns the ranks (``--signal``)
            and the cell says so; at most half the time limit.
        sbatch_options: more ``sbatch`` options, one per item ("--exclusive", "--mail-type=END").
        setup: shell lines each rank runs before Python starts (``module load ...``,
            ``source venv/bin/activate``).
        python: the interpreter on the nodes (default: this kernel's, on a shared filesystem).
        kernel_address: the address the nodes reach this kernel on; its listener binds there
            only (default: the address this host's name resolves to).
        timeout: seconds the ranks get to connect once the job runs.
        queue_timeout: seconds the job may wait in the queue (None: as long as it takes).

    Raises:
        TypeError, ValueError: naming the setting, the value received and what is allowed.
    """

    partition: str | None = None
    nodes: int | None = None
    tasks_per_node: int | None = None
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem: str | None = None
    time: str | None = None
    time_warning: float = 60.0
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    sbatch_options: tuple[str, ...] = ()
    setup: str = ""
    python: str | None = None
    kernel_address: str | None = None
    timeout: float = 120.0
    queue_timeout: float | None = None

    start_method = "slurm"  # the launcher that runs it (not a field)

    def __post_init__(self) -> None:
        for name in ("partition", "account", "qos", "constraint"):
            _word(name, getattr(self, name))
        if self.nodes is not None:
            check_int_in("nodes", self.nodes, 1)
        if self.tasks_per_node is not None:
            check_int_in("tasks_per_node", self.tasks_per_node, 1)
        check_int_in("gpus_per_node", self.gpus_per_node, 0)
        check_int_in("cpus_per_task", self.cpus_per_task, 1)
        if self.mem is not None and (not isinstance(self.mem, str) or not _MEM.match(self.mem)):
            raise invalid(
                "mem", self.mem, "expected memory per node as sbatch takes it, e.g. '16G'"
            )
        if self.time is not None and (not isinstance(self.time, str) or not _TIME.match(self.time)):
            raise invalid(
                "time", self.time, "expected a time limit as sbatch takes it, e.g. '1:00:00'"
            )
        check_seconds("time_warning", self.time_warning, allow_none=False, high=65535)
        object.__setattr__(self, "sbatch_options", _options(self.sbatch_options))
        if not isinstance(self.setup, str):
            raise invalid("setup", self.setup, "expected shell lines as a str", TypeError)
        if self.python is not None and (not isinstance(self.python, str) or not self.python):
            raise invalid("python", self.python, "expected the nodes' interpreter path as a str")
        if self.kernel_address is not None:
            _address(self.kernel_address)
        object.__setattr__(
            self, "timeout", check_seconds("timeout", self.timeout, allow_none=False)
        )
        object.__setattr__(
            self, "queue_timeout", check_seconds("queue_timeout", self.queue_timeout)
        )

    # -- what the planner reads ---------------------------------------------------------------

    @property
    def gpus(self) -> int:
        return 1 if self.gpus_per_node else 0

    @property
    def resources(self) -> dict[str, float]:
        return {"CPU": float(self.cpus_per_task), "GPU": float(self.gpus)}

    def layout(self, num_processes: int | None) -> tuple[int, int]:
        """``(nodes, tasks_per_node)`` for ``num_processes`` ranks (None: as the settings say);
        a ValueError names what does not add up."""
        nodes, per_node = self.nodes, self.tasks_per_node
        if num_processes is None:
            if per_node is None:
                raise invalid(
                    "num_processes",
                    None,
                    "say how many ranks to start, e.g. num_processes=4, or "
                    "SlurmCluster(nodes=..., tasks_per_node=...)",
                )
            num_processes = (nodes or 1) * per_node
        if nodes is None:
            nodes = num_processes // per_node if per_node else 1
        if per_node is None:
            per_node = num_processes // nodes if num_processes % nodes == 0 else 0
        if nodes * per_node != num_processes or per_node == 0:
            raise invalid(
                "num_processes",
                num_processes,
                f"expected nodes x tasks_per_node ranks (SlurmCluster(nodes={self.nodes}, "
                f"tasks_per_node={self.tasks_per_node}))",
            )
        if self.gpus_per_node and per_node > self.gpus_per_node:
            raise invalid(
                "tasks_per_node",
                per_node,
                f"each rank drives one GPU: at most gpus_per_node={self.gpus_per_node} per node",
            )
        return nodes, per_node

    def address(self) -> str:
        """Where this kernel listens for its ranks."""
        if self.kernel_address is not None:
            return self.kernel_address
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"

    @property
    def warning_seconds(self) -> int:
        """Seconds before the time limit at which Slurm warns the ranks: ``time_warning``, at
        most half the time limit (a warning due before the ranks started would reach no one)."""
        limit = time_limit_seconds(self.time) if self.time is not None else None
        warning = int(self.time_warning)
        return warning if limit is None else min(warning, limit // 2)

    store_text = "a free port on this kernel's address"  # where the ranks meet (the panel)

    @property
    def placement(self) -> str:
        """Where the ranks start: a step of this kernel's allocation, or of a new job."""
        job = os.environ.get("SLURM_JOB_ID")
        return f"a job step of this kernel's job {job}" if job else "a job step of a new job"

    def where(self, ranks: int) -> str:
        """'Slurm (partition debug), 4 ranks: 2 nodes x 2 tasks, 1 CPU each' (the panel)."""
        try:
            nodes, per_node = self.layout(ranks)
            shape = f"{nodes} node{'s' if nodes != 1 else ''} × {per_node} tasks"
        except ValueError:
            shape = "nodes × tasks not matching"
        return f"Slurm ({self.describe()}), {ranks} ranks: {shape}, {self.cpus_per_task} CPU each"

    def describe(self) -> str:
        """'partition debug, 2 nodes x 2 tasks' (what the panel and errors show)."""
        parts = [f"partition {self.partition or '(default)'}"]
        if self.gpus_per_node:
            parts.append(f"{self.gpus_per_node} GPUs per node")
        return ", ".join(parts)


def time_limit_seconds(text: str) -> int | None:
    """Seconds of a Slurm time limit ("30", "1:00:00", "2-12", "2-12:30:00"); None for one this
    cannot read ("infinite" and the like)."""
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(part) for part in rest.split(":")]
        days_count = int(days)
    except ValueError:
        return None
    if "-" in text:  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts[:3]
    elif len(parts) == 1:  # minutes
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:  # minutes:seconds
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:
        hours, minutes, seconds = parts[:3]
    return ((days_count * 24 + hours) * 60 + minutes) * 60 + seconds


def _word(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not _WORD.match(value):
        raise invalid(name, value, "expected None or a Slurm name as a str (no spaces)")


def _options(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)):
        raise invalid(
            "sbatch_options", value, "expected a list of sbatch options, e.g. ['--exclusive']"
        )
    items = []
    for item in value:
        text = item.strip().removeprefix("#SBATCH").strip() if isinstance(item, str) else None
        if not text or not text.startswith("-") or "\n" in text:
            raise invalid(
                "sbatch_options",
                value,
                f"each item is one sbatch option starting with '-', got {short_repr(item)}",
            )
        items.append(text)
    return tuple(items)


def _address(value: object) -> None:
    allowed = "expected the address the nodes reach this kernel on (an IP address or host name)"
    if not isinstance(value, str) or not value.strip() or " " in value:
        raise invalid("kernel_address", value, allowed)
    try:
        unspecified = ipaddress.ip_address(value).is_unspecified
    except ValueError:
        return  # a host name
    if unspecified:
        raise invalid("kernel_address", value, allowed + ", never every interface")


def check_slurm_settings(cluster: SlurmCluster, given: dict) -> None:
    """Refuse the launch settings that mean nothing on Slurm."""
    for name, unused, why in NOT_ON_SLURM:
        if given.get(name, unused) != unused:
            raise invalid(name, given[name], f"not used with cluster='slurm' ({why}); leave it out")


__all__ = ["SlurmCluster", "check_slurm_settings"]
