"""write_basic_config / load_config, and the dependency-free YAML they use."""

from __future__ import annotations

import json
import math

import pytest

from notebook_launcher.utils import yaml_lite
from notebook_launcher.utils.config import default_config_file, load_config, write_basic_config

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
    text = path.read_text()
    assert text.startswith("{") == name.endswith(".json")


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


def test_yaml_subset_errors_name_the_line():
    with pytest.raises(ValueError, match="line 2: expected 'key: value'"):
        yaml_lite.loads("a: 1\njust text\n")
    with pytest.raises(ValueError, match="line 1: .*outside the YAML subset"):
        yaml_lite.loads("a: [1, 2]\n")
    with pytest.raises(ValueError, match="line 3: unexpected indentation"):
        yaml_lite.loads("a: 1\nb: 2\n    c: 3\n")


def test_yaml_scalars_round_trip():
    data = {
        "none": None, "t": True, "f": False, "int": -12, "float": 1e-05, "big": 1e16,
        "nan": math.nan, "inf": -math.inf, "reserved": "yes", "number_like": "123",
        "quote": "it's \"quoted\"", "colon": "a: b", "hash": "x #y", "empty": "",
        "unicode": "été 🎉 \u2028 \x00 \ufeff", "key with space": 1, "list": ["a", 1, None],
        "nested": {"deeper": {"x": 1}, "empty": {}},
    }  # fmt: skip
    back = yaml_lite.loads(yaml_lite.dumps(data))
    assert math.isnan(back.pop("nan"))
    assert back == {k: v for k, v in data.items() if k != "nan"}


def test_yaml_strings_agree_with_pyyaml():
    import hypothesis
    import yaml

    st = hypothesis.strategies
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()

    @hypothesis.given(st.dictionaries(st.text(min_size=1), scalars, max_size=6))
    @hypothesis.settings(max_examples=300, deadline=None)
    def check(data):
        text = yaml_lite.dumps(data)
        assert yaml_lite.loads(text) == data
        assert yaml.safe_load(text) == data

    check()
