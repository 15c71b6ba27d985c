"""Every numeric and textual setting of a launch is bounded: fuzzed settings either launch a trivial
function or raise a ValueError/TypeError naming a parameter, never hang, never leave a process."""

from __future__ import annotations

import math
import os
import re
import time

import pytest
from helpers.processtree import live_descendants
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notebook_launcher import notebook_launcher as launch
from notebook_launcher import plan_launch
from notebook_launcher.backends import CpuBackend
from notebook_launcher.launch.planning.planner import MAX_PROCESSES_ENV
from notebook_launcher.protocol import shared_files
from notebook_launcher.utils.environment import available_cpu_count, cuda_device_count

HAS_GPU = cuda_device_count() > 0
CORES = available_cpu_count()
HUGE = 10**5000  # too long for int -> str: messages must still be built


def seven():
    return 7


# Values of every type for every parameter: the valid ones keep a launch short and on one node.
JUNK = [None, True, False, -1, 0, HUGE, -HUGE, 10**18, 1e308, math.inf, -math.inf, math.nan]
JUNK += ["", "x", "2", "1e9", b"2", [], {}, 0.5, -0.0, 2**63]
PARAMETERS = {
    "num_processes": [1, 2],
    "mixed_precision": ["no"],
    "use_port": [0, "0"],
    "master_addr": ["127.0.0.1", "localhost"],
    "node_rank": [0],
    "num_nodes": [1],
    "rdzv_backend": ["static"],
    "rdzv_endpoint": [""],
    "rdzv_id": ["none", "job"],
    "max_restarts": [0, 1, 100],
    "monitor_interval": [0.001, 0.1, 5],
    "log_line_prefix_template": [None, "[{rank}] "],
    "start_method": ["fork"],
    "timeout": [30, 60.0],
    "stall_timeout": [None, 30, 30 * 24 * 3600],
    "stall_notice": [None, 0.5, 60.0],
    "threads_per_process": [None, 1],
    "output": ["none", "main"],
    "ui": ["none"],
    "rdzv_timeout": [1, 300.0],
    "rdzv_conf": [None, {}],
}
EXTRA_INVALID = {
    "num_processes": [4 * CORES + 1, 10**6],
    "mixed_precision": ["fp64", "NO"],
    "use_port": [65536, "http"],
    "master_addr": ["   "],
    "node_rank": [1, 7],
    "rdzv_backend": ["etcd"],
    "rdzv_endpoint": ["nohost:notaport"],
    "max_restarts": [101],
    "monitor_interval": [1e-9, 5.01, 1e6, 1e9],
    "log_line_prefix_template": ["{nope}", "{"],
    "start_method": ["forkserver", "FORK"],
    "timeout": [30 * 24 * 3600 + 1],
    "stall_timeout": [1e7],
    "stall_notice": [1e12],
    "threads_per_process": [CORES + 1, 10**9],
    "output": ["some"],
    "ui": ["fancy"],
    "rdzv_conf": [{"timeout": "x"}, {"nope": 1}, [1]],
}
counted = {"examples": 0, "launched": 0}


@st.composite
def launch_settings(draw):
    chosen = {}
    all_valid = draw(st.integers(0, 3)) == 0  # so that many examples launch
    for name, valid in PARAMETERS.items():
        if all_valid or draw(st.integers(0, 9)) < 8:
            if name == "timeout" or draw(st.booleans()):
                chosen[name] = draw(st.sampled_from(valid))
        else:
            chosen[name] = draw(st.sampled_from(JUNK + EXTRA_INVALID.get(name, [])))
    return chosen


@pytest.mark.skipif(HAS_GPU, reason="the valid num_processes here are CPU counts")
@pytest.mark.timeout(240)
@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
@given(launch_settings())
def test_fuzzed_settings_launch_or_name_the_parameter(chosen):
    counted["examples"] += 1
    started = time.monotonic()
    try:
        result = launch(seven, **chosen)
    except (ValueError, TypeError) as error:
        message = str(error)
        named = [
            n
            for n in [*PARAMETERS, MAX_PROCESSES_ENV]
            if re.search(rf"\b{n}(\[[^]]*\])?=", message)
        ]
        assert named, f"{type(error).__name__} names no parameter: {message[:300]}"
        assert len(message) < 2000
    else:
        counted["launched"] += 1
        assert result.values == [7] * chosen.get("num_processes", 1)
    assert time.monotonic() - started < 30
    assert not live_descendants(), "a worker outlived its launch"
    assert not shared_files.leftover_files(os.getpid())


def test_fuzz_count():
    """Runs after the fuzz test (file order): reports how many examples ran and launched."""
    print(f"fuzz: {counted['examples']} examples, {counted['launched']} launched")
    if counted["examples"]:
        assert counted["launched"] > 0, "no example was valid: the fuzz never launched"


@pytest.mark.parametrize(
    "settings_, name, allowed",
    [
        ({"num_processes": 4 * CORES + 1}, "num_processes", f"<= {4 * CORES}"),
        ({"num_processes": 10**6}, "num_processes", MAX_PROCESSES_ENV),
        ({"num_processes": 2, "threads_per_process": CORES + 1}, "threads_per_process", "cores"),
        ({"num_processes": 2, "monitor_interval": 1e9}, "monitor_interval", "from 0.001 to 5"),
        ({"num_processes": 2, "monitor_interval": 0.0001}, "monitor_interval", "from 0.001"),
        ({"num_processes": 2, "stall_timeout": 1e9}, "stall_timeout", "<= 2.592e+06"),
        ({"num_processes": 2, "timeout": math.inf}, "timeout", "> 0"),
        ({"num_processes": 2, "rdzv_timeout": math.nan}, "rdzv_timeout", "> 0"),
        ({"num_processes": 2, "timeout": HUGE}, "timeout", "an int of"),
        ({"num_processes": 2, "max_restarts": 101}, "max_restarts", "<= 100"),
        ({"num_processes": 2, "num_nodes": 10**9}, "num_nodes", "<= 65536"),
    ],
)
def test_bounds_name_parameter_value_and_range(settings_, name, allowed):
    with pytest.raises(ValueError) as info:
        plan_launch(backend=CpuBackend(), **settings_)
    message = str(info.value)
    assert message.startswith(f"{name}=")
    assert allowed in message


def test_more_cpu_processes_with_the_environment_variable(monkeypatch):
    many = 4 * CORES + 1
    monkeypatch.setenv(MAX_PROCESSES_ENV, str(many))
    assert plan_launch(num_processes=many, backend=CpuBackend()).num_processes == many
    with pytest.raises(ValueError, match=f"num_processes={many + 1} .*{MAX_PROCESSES_ENV}"):
        plan_launch(num_processes=many + 1, backend=CpuBackend())
    monkeypatch.setenv(MAX_PROCESSES_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MAX_PROCESSES_ENV}='lots'"):
        plan_launch(num_processes=2, backend=CpuBackend())
