"""LaunchPlan: every decision about a launch (made by :mod:`.planner` from the user's
:class:`~.settings.LaunchSettings`), frozen, passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch will do. Built by :func:`~.planner.plan_launch`; never mutated."""

    num_processes: int  # processes on this node
    num_nodes: int
    node_rank: int
    start_method: str
    device: str  # "cpu", "cuda" or "xla"
    mixed_precision: str
    master_addr: str  # where the workers find the store; 127.0.0.1 for one node
    requested_port: int
    exact_port: bool  # multi-node jobs must use the port every node was told
    rdzv_backend: str
    rdzv_id: str
    max_restarts: int
    monitor_interval: float
    timeout: float | None
    stall_timeout: float | None
    threads_per_process: int
    output: str
    log_line_prefix_template: str
    stall_notice: float | None  # quiet seconds before a notice; None: off
    stop_grace: float  # seconds from the catchable stop signal to SIGKILL
    rdzv_timeout: float  # seconds every node waits for the others to arrive
    rdzv_endpoint: str = ""  # "host:port" of the c10d rendezvous; "" for static
    rdzv_conf: tuple[tuple[str, object], ...] = ()  # sorted items of rdzv_conf
    # start_method="auto": fork, switched to spawn where the kernel's state would break forked
    # workers (CUDA initialised) and the function and its arguments can travel by value.
    auto_start_method: bool = False
    cluster: Any = None  # a RayCluster: the ranks run as Ray actors (start_method "ray")
    # The cell has %pdb on: a rank whose function raises opens the debugger before it reports.
    post_mortem: bool = False

    @property
    def world_size(self) -> int:
        return self.num_processes * self.num_nodes

    @property
    def multi_node(self) -> bool:
        return self.num_nodes > 1

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.num_processes + local_rank

    def node_ranks(self, node_rank: int) -> range:
        """The global ranks of the processes of node ``node_rank``."""
        return range(node_rank * self.num_processes, (node_rank + 1) * self.num_processes)

    def prefix(self, rank: int, local_rank: int) -> str:
        return self.log_line_prefix_template.format(
            rank=rank,
            local_rank=local_rank,
            node_rank=rank // self.num_processes,
            role_name="default",
        )
