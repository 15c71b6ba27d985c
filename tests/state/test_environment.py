"""Environment checks: switches, versions, devices, bf16 and memory."""

from __future__ import annotations

import psutil
import pytest
import torch
from packaging.version import Version

from notebook_launcher.utils.environment import (
    is_bf16_available,
    is_cuda_available,
    is_mps_available,
    is_torch_xla_available,
    is_tpu_available,
    parse_flag_from_env,
    str_to_bool,
)
from notebook_launcher.utils.memory import convert_file_size_to_int, get_max_memory
from notebook_launcher.utils.versions import compare_versions, is_torch_version


@pytest.mark.parametrize("text", ["1", "true", "TRUE", "yes", "y", "t", "on", " On "])
def test_true_switches(text):
    assert str_to_bool(text) is True


@pytest.mark.parametrize("text", ["0", "false", "no", "n", "f", "off", ""])
def test_false_switches(text):
    assert str_to_bool(text) is False


def test_flags_from_the_environment(monkeypatch):
    assert parse_flag_from_env("NL_TEST_FLAG") is False
    assert parse_flag_from_env("NL_TEST_FLAG", default=True) is True
    monkeypatch.setenv("NL_TEST_FLAG", "on")
    assert parse_flag_from_env("NL_TEST_FLAG") is True
    monkeypatch.setenv("NL_TEST_FLAG", "sometimes")
    with pytest.raises(ValueError, match="NL_TEST_FLAG='sometimes'"):
        parse_flag_from_env("NL_TEST_FLAG")


def test_torch_version_ignores_the_local_build_tag():
    public = Version(torch.__version__).public
    assert is_torch_version("==", public)
    assert is_torch_version(">=", public) and is_torch_version("<=", public)
    assert is_torch_version("==", "2.13.0")  # this machine's torch is 2.13.0+cpu
    assert not is_torch_version("!=", "2.13")
    assert is_torch_version(">", "2.3") and is_torch_version("<", "10")
    assert not is_torch_version("==", "2.13.0+cu121")  # a local tag asked for is compared


def test_compare_versions_of_installed_libraries_and_versions():
    assert compare_versions("psutil", ">=", "5.0")
    assert compare_versions(Version("1.2.3+local"), "==", "1.2.3")
    assert compare_versions("1.10", ">", "1.9")
    with pytest.raises(ValueError, match="operation='=>'.*'>', '>=', '==', '!=', '<=', '<'"):
        is_torch_version("=>", "2.0")
    with pytest.raises(ValueError, match="requirement_version='two'"):
        is_torch_version("==", "two")
    with pytest.raises(TypeError, match="requirement_version=2"):
        is_torch_version("==", 2)


def test_device_checks_on_a_cpu_machine():
    assert is_cuda_available() is False
    assert is_mps_available() is False
    assert is_torch_xla_available() is False
    assert is_tpu_available() is False and is_tpu_available(check_device=False) is False
    assert is_bf16_available() is True  # CPUs support bf16
    assert is_bf16_available(ignore_tpu=True) is True
    with pytest.raises(TypeError, match="ignore_tpu='no'"):
        is_bf16_available("no")
    with pytest.raises(TypeError, match="check_is_tpu=1"):
        is_torch_xla_available(check_is_tpu=1)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (1234, 1234),
        ("10GiB", 10 * 2**30),
        ("10gib", 10 * 2**30),
        ("500MB", 500 * 10**6),
        ("1.5 KiB", 1536),
        ("2TB", 2 * 10**12),
        ("8Mb", 10**6),
        ("7", 7),
        ("3B", 3),
    ],
)
def test_sizes(size, expected):
    assert convert_file_size_to_int(size) == expected


@pytest.mark.parametrize("size", ["lots", "10 XB", "-5GB", "GiB", "5iB", -1])
def test_bad_sizes_name_the_value(size):
    with pytest.raises(ValueError, match=r"size=.*is not valid: expected bytes"):
        convert_file_size_to_int(size)


def test_bad_size_types():
    with pytest.raises(TypeError, match="size=1.5"):
        convert_file_size_to_int(1.5)
    with pytest.raises(TypeError, match="size=True"):
        convert_file_size_to_int(True)


def test_measured_memory_on_this_machine():
    measured = get_max_memory()
    assert list(measured) == ["cpu"]
    available = psutil.virtual_memory().available
    assert abs(measured["cpu"] - available) < 0.2 * available


def test_given_memory_is_converted_and_ordered():
    with pytest.warns(UserWarning) as warned:
        result = get_max_memory({"disk": "1GB", "cpu": "2GiB", 1: 5, 0: "1MB"})
    assert [str(w.message) for w in warned] == [
        f"max_memory names GPU {i}, but this machine has 0 GPU(s)" for i in (0, 1)
    ]
    assert list(result.items()) == [(0, 10**6), (1, 5), ("cpu", 2 * 2**30), ("disk", 10**9)]


def test_bad_memory_maps():
    with pytest.raises(ValueError, match="the key 'gpu' is not a device"):
        get_max_memory({"gpu": "1GB"})
    with pytest.raises(ValueError, match="the key -1 is not a device"):
        get_max_memory({-1: "1GB"})
    with pytest.raises(TypeError, match="max_memory=.*expected a dict"):
        get_max_memory(["cpu"])


def test_utils_exports_every_listed_name():
    import notebook_launcher.utils as utils

    for name in utils.__all__:
        assert getattr(utils, name) is not None, name
    assert set(utils.__all__) <= set(dir(utils))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = utils.nothing_here
