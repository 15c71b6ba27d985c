"""A basic launch configuration for this machine (its devices, one node), as Accelerate's config
file: written as JSON, which is also valid YAML, and read back from JSON or YAML."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..utils.enums import MIXED_PRECISION_CHOICES
from ..utils.validation import check_choice, check_path
from . import detect_backend

CONFIG_SUFFIXES = (".json", ".yaml", ".yml")

hf_cache_home = os.path.expanduser(
    os.environ.get(
        "HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    )
)
default_config_file = os.path.join(hf_cache_home, "accelerate", "default_config.yaml")


def _config_path(name: str, value: object) -> Path:
    return Path(check_path(name, value, CONFIG_SUFFIXES)).expanduser()


def machine_config(mixed_precision: str = "no") -> dict[str, Any]:
    """The settings ``write_basic_config`` writes for this machine (its devices, one node)."""
    backend = detect_backend()
    count = backend.device_count() if backend.accelerator else 1
    distributed = backend.distributed_type if count > 1 else "NO"
    return {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": str(distributed),
        "downcast_bf16": False,
        "enable_cpu_affinity": False,
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": mixed_precision,
        "num_machines": 1,
        "num_processes": count,
        "rdzv_backend": "static",
        "same_network": False,
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": not backend.accelerator,
    }


def write_basic_config(mixed_precision: str = "no", save_location: str = default_config_file):
    """Write a one-machine configuration (all local GPUs, or the CPU) unless the file exists.

    Args:
        mixed_precision: "no", "fp16", "bf16" or "fp8" (any case).
        save_location: where to write (``.json``, ``.yaml`` or ``.yml``; the file is JSON).
            Defaults to ``$HF_HOME/accelerate/default_config.yaml``, where Accelerate looks.

    Returns:
        The path written, or False when a file is already there (it is left untouched, and a
        line says so).

    Note:
        As Accelerate does, this writes JSON whatever the extension: JSON is also valid YAML, so
        Accelerate and any YAML reader read the file.

    Raises:
        TypeError, ValueError: a bad ``mixed_precision`` or ``save_location``, naming it.
    """
    precision = check_choice("mixed_precision", mixed_precision, MIXED_PRECISION_CHOICES, str.lower)
    path = _config_path("save_location", save_location)
    if path.exists():
        print(
            f"Configuration already exists at {save_location}, will not override it. Remove it "
            "or pass a different save_location."
        )
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    config = machine_config(precision)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a configuration file written by :func:`write_basic_config` (or Accelerate).

    JSON content is read as JSON whatever the extension (Accelerate writes JSON into
    ``.yaml`` files); other ``.yaml``/``.yml`` files are read with PyYAML, where it is installed.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a configuration mapping, naming the file and the problem.
    """
    file = _config_path("path", path)
    text = file.read_text(encoding="utf-8")
    if file.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if file.suffix.lower() == ".json":
                raise ValueError(f"{file}: not valid JSON ({exc})")
            data = _load_yaml(file, text)
    else:
        data = _load_yaml(file, text)
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _load_yaml(file: Path, text: str) -> Any:
    try:
        import yaml  # optional: only YAML that is not JSON needs it
    except ImportError:
        raise ValueError(
            f"{file}: this YAML file is not JSON, and reading other YAML needs PyYAML "
            "(pip install pyyaml)"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{file}: not valid YAML ({exc})") from None
