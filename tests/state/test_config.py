"""write_basic_config / load_config: JSON written (valid YAML), JSON or YAML read back."""

from __future__ import annotations

import json
import sys

import pytest

from notebook_launcher.backends.config_file import (
    default_config_file,
    load_config,
    write_basic_config,
)

EXPECTED_CPU_CONFIG = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "distributed_type": "NO",
    "downcast_bf16": False,
    "enable_cpu_affinity": False,
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 1,
    "rdzv_backend": "static",
    "same_network": False,
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": True,
}


@pytest.mark.parametrize("name", ["cfg.json", "cfg.yaml", "nested/dir/cfg.yml"])
def test_round_trip(tmp_path, name):
    path = write_basic_config("BF16", tmp_path / name)
    assert path == tmp_path / name
    assert load_config(path) == EXPECTED_CPU_CONFIG
    assert path.read_text().startswith("{")  # JSON whatever the extension, as Accelerate


def test_yaml_is_standard_yaml(tmp_path):
    import yaml

    path = write_basic_config("fp16", str(tmp_path / "c.yaml"))
    assert yaml.safe_load(path.read_text()) == {**EXPECTED_CPU_CONFIG, "mixed_precision": "fp16"}


def test_reads_accelerates_json_in_a_yaml_file(tmp_path):
    path = tmp_path / "default_config.yaml"
    path.write_text(json.dumps(EXPECTED_CPU_CONFIG, indent=2))
    assert load_config(path) == EXPECTED_CPU_CONFIG


def test_reads_yaml_as_accelerate_config_writes_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "compute_environment: LOCAL_MACHINE\ndebug: false\ndowncast_bf16: 'no'\n"
        "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: default\n"
        "fsdp_config: {}\ngpu_ids: all\nnum_processes: 2  # two GPUs\ntpu_env: []\n"
        "ids:\n- 0\n- 1\n"
    )
    assert load_config(path) == {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "downcast_bf16": "no",
        "dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default"},
        "fsdp_config": {},
        "gpu_ids": "all",
        "num_processes": 2,
        "tpu_env": [],
        "ids": [0, 1],
    }


def test_an_existing_file_is_left_alone(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text("{}")
    assert write_basic_config(save_location=path) is False
    assert path.read_text() == "{}"
    assert "already exists" in capsys.readouterr().out


def test_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="mixed_precision='fp32'.*'no', 'fp16', 'bf16', 'fp8'"):
        write_basic_config("fp32", tmp_path / "c.json")
    with pytest.raises(ValueError, match=r"save_location=.*\.txt.*\.json, \.yaml or \.yml"):
        write_basic_config("no", tmp_path / "c.txt")
    with pytest.raises(TypeError, match="save_location=3"):
        write_basic_config("no", 3)
    with pytest.raises(TypeError, match="mixed_precision=None"):
        write_basic_config(None, tmp_path / "c.json")
    assert not list(tmp_path.iterdir())


def test_default_location_is_accelerates():
    assert default_config_file.endswith("accelerate/default_config.yaml")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        load_config(bad)
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_config(listing)


def test_yaml_that_is_not_json_needs_pyyaml(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("num_processes: 2\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(ValueError, match="c.yaml: .*needs PyYAML"):
        load_config(path)
    written = write_basic_config("no", tmp_path / "written.yaml")
    assert load_config(written)["mixed_precision"] == "no"  # JSON: read without PyYAML


def test_bad_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("a: [1, 2\n")
    with pytest.raises(ValueError, match="bad.yml: not valid YAML"):
        load_config(path)
