"""What the Ray lane's tests share: the cluster's settings and what to read from it."""

from __future__ import annotations

import os

import psutil

from helpers.processtree import listening

# In every process that calls ray.init (this one, and the nodes it starts): without it Ray takes
# "this node" to be the machine's external address even when told 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

try:
    import ray
except ImportError:  # the lane's tests skip, saying why (see the cluster fixture)
    ray = None
NO_RAY = 'Ray is not installed (pip install "notebook_launcher[ray]"; CI installs it)'

LOOPBACK = "127.0.0.1"
SLOTS = {"CPU": 1, "slot": 1}  # what each rank reserves: 2 ranks per node
# Seconds the lane's launches give their ranks to start. Ray starts its workers at niceness 15:
# beside other busy processes on these 2 cores a 4-rank launch took 60 s to start.
START = 300.0
NODE_ARGS = {"num_cpus": 2, "node_ip_address": LOOPBACK}


def start_two_nodes():
    """The lane's cluster (also the Ray benchmarks'): the head node and one more, each with 2 CPUs
    and 2 ``slot`` resources (the second also one ``pair``), every node at 127.0.0.1, no
    dashboard; this process joined as its driver. Stop it with :func:`stop`."""
    from ray.cluster_utils import Cluster

    local = Cluster(
        initialize_head=True,
        head_node_args={**NODE_ARGS, "include_dashboard": False, "resources": {"slot": 2}},
    )
    try:
        local.add_node(**NODE_ARGS, resources={"slot": 2, "pair": 1})
        local.wait_for_nodes()
        ray.init(address=local.address, log_to_driver=False, _node_ip_address=LOOPBACK)
    except BaseException:
        stop(local)
        raise
    return local


def rank_niceness() -> int:
    """The niceness a rank's actor runs at: this process's where a process may raise its own
    priority (root, or an ``RLIMIT_NICE`` that allows it), else Ray's workers' 15."""
    import resource

    mine = os.nice(0)
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    allowed = os.geteuid() == 0 or soft == resource.RLIM_INFINITY or 20 - soft <= mine
    return mine if allowed else max(mine, 15)


def stop(local) -> None:
    """Leave the cluster and shut its nodes down."""
    ray.shutdown()
    local.shutdown()


def live_actors() -> list[dict]:
    return [a for a in ray._private.state.actors().values() if a["State"] != "DEAD"]


def held_groups() -> list[dict]:
    return [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]


def rank_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "RankActor" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def listening_addresses() -> set[str]:
    """The addresses anything of the cluster (this process and every process it started: the
    nodes, the ranks' actors) listens on."""
    found = set()
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            # A dual-stack socket bound to 127.0.0.1 shows it as ::ffff:127.0.0.1.
            found |= {ip.removeprefix("::ffff:") for ip, _ in listening(proc)}
        except psutil.Error:
            continue
    return found
