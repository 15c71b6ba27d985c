"""The multi-node settings are checked before anything starts, and planned as documented."""

from __future__ import annotations

import inspect
import os

import pytest

from notebook_launcher import notebook_launcher as launch
from notebook_launcher import plan_launch
from notebook_launcher.backends import CpuBackend


def plan(**changes):
    """plan_launch with notebook_launcher's defaults, two CPU processes and ``changes``."""
    wanted = inspect.signature(plan_launch).parameters
    defaults = {
        name: param.default
        for name, param in inspect.signature(launch).parameters.items()
        if name in wanted and param.default is not param.empty
    }
    return plan_launch(**{**defaults, "num_processes": 2, "backend": CpuBackend(), **changes})


def rank():
    return int(os.environ["RANK"])


TWO = dict(num_nodes=2, node_rank=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "expected"),
    [
        ({"rdzv_timeout": 0}, ValueError, ["rdzv_timeout=0", "seconds > 0"]),
        ({"rdzv_timeout": -5}, ValueError, ["rdzv_timeout=-5", "seconds > 0"]),
        ({"rdzv_timeout": "60"}, ValueError, ["rdzv_timeout='60'", "seconds > 0"]),
        ({"rdzv_timeout": None}, ValueError, ["rdzv_timeout=None", "seconds > 0"]),
        ({"rdzv_conf": [("rank", 0)]}, TypeError, ["rdzv_conf=[('rank', 0)]", "dict or None"]),
        (
            {"rdzv_conf": {"join_timeout": 5}, **TWO},
            ValueError,
            ["key 'join_timeout' is not a setting of rdzv_backend='static'", "'rank'", "'timeout'"],
        ),
        ({"rdzv_conf": {"rank": 0}, **TWO}, ValueError, ["rdzv_conf['rank']=0", "node_rank=1"]),
        (
            {"rdzv_backend": "c10d", "rdzv_conf": {"join_timeout": 0}},
            ValueError,
            ["rdzv_conf['join_timeout']=0", "seconds > 0"],
        ),
        (
            {"rdzv_backend": "c10d", "rdzv_conf": {"is_host": "maybe"}},
            ValueError,
            ["rdzv_conf['is_host']='maybe'", "True or False"],
        ),
        (
            {"rdzv_backend": "c10d", "rdzv_conf": {"store_type": "file"}},
            ValueError,
            ["rdzv_conf['store_type']='file'", "'tcp'"],
        ),
        (
            {"rdzv_backend": "c10d", "rdzv_conf": {"rank": 0}},
            ValueError,
            ["key 'rank' is not a setting of rdzv_backend='c10d'", "'join_timeout'"],
        ),
        ({"rdzv_endpoint": "host:99999"}, ValueError, ["rdzv_endpoint='host:99999'", "1 to 65535"]),
        ({"rdzv_endpoint": "host:http"}, ValueError, ["rdzv_endpoint='host:http'", "'host:port'"]),
        ({"rdzv_endpoint": ":29400"}, ValueError, ["rdzv_endpoint=':29400'", "'host:port'"]),
        ({"rdzv_endpoint": "a b:1"}, ValueError, ["rdzv_endpoint='a b:1'", "'host:port'"]),
        ({"rdzv_endpoint": 29400}, TypeError, ["rdzv_endpoint=29400", "'host:port'"]),
        ({"rdzv_id": ""}, ValueError, ["rdzv_id=''", "non-empty str"]),
        ({"master_addr": " "}, ValueError, ["master_addr=' '", "host name or IP address"]),
        ({"use_port": 0, **TWO}, ValueError, ["use_port=0", "fixed port every node was told"]),
        ({"rdzv_backend": "etcd"}, ValueError, ["rdzv_backend='etcd'", "'static'", "'c10d'"]),
    ],
)
def test_bad_settings_name_the_parameter_the_value_and_what_is_allowed(kwargs, error, expected):
    with pytest.raises(error) as info:
        launch(rank, num_processes=2, **kwargs)

    for text in expected:
        assert text in str(info.value)


def test_a_multi_node_plan():
    two = plan(num_nodes=2, node_rank=1, master_addr="10.0.0.1", use_port=29501)

    assert (two.world_size, two.multi_node, two.exact_port) == (4, True, True)
    assert [two.global_rank(local) for local in (0, 1)] == [2, 3]
    assert list(two.node_ranks(0)) == [0, 1]
    assert two.master_addr == "10.0.0.1"
    assert two.prefix(3, 1) == "[node1:1 rank3] "
    assert two.rdzv_timeout == 300.0
    assert two.rdzv_endpoint == ""  # static: node 0 hosts at master_addr:use_port


def test_one_node_keeps_the_rendezvous_on_loopback():
    one = plan(master_addr="10.0.0.1")

    assert one.master_addr == "127.0.0.1"
    assert one.prefix(1, 1) == "[rank1] "
    assert not one.multi_node and not one.exact_port


def test_c10d_endpoint_and_torch_timeouts():
    assert plan(rdzv_backend="c10d", num_nodes=2, use_port=29555).rdzv_endpoint == "127.0.0.1:29555"
    assert plan(rdzv_backend="c10d", rdzv_endpoint="node0").rdzv_endpoint == "node0:29400"
    assert plan(rdzv_backend="c10d", rdzv_endpoint="[::1]:7").rdzv_endpoint == "[::1]:7"
    c10d = plan(
        rdzv_backend="c10d", rdzv_conf={"join_timeout": "42", "is_host": "true"}, rdzv_timeout=9
    )
    assert c10d.rdzv_timeout == 42.0  # torch's own key wins over rdzv_timeout
    assert dict(c10d.rdzv_conf) == {"join_timeout": 42.0, "is_host": True}
    static = plan(num_nodes=2, rdzv_conf={"rank": 0, "timeout": 7})
    assert static.rdzv_timeout == 7.0
    assert plan(rdzv_timeout=12).rdzv_timeout == 12.0
