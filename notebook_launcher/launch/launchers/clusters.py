"""``cluster=`` in its one form: None (this machine), a :class:`RayCluster` or a
:class:`SlurmCluster`, from the record itself or its name ("ray", "slurm")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...utils.validation import invalid
from .ray.settings import RayCluster
from .ray.settings import check_cluster_settings as check_ray_settings
from .slurm.settings import SlurmCluster, check_slurm_settings

BY_NAME = {"ray": RayCluster, "slurm": SlurmCluster}


def check_cluster(value: object) -> RayCluster | SlurmCluster | None:
    """None, or the cluster record ``value`` stands for."""
    if value is None or isinstance(value, (RayCluster, SlurmCluster)):
        return value
    if isinstance(value, str) and value.strip().lower() in BY_NAME:
        return BY_NAME[value.strip().lower()]()
    raise invalid(
        "cluster",
        value,
        "expected None (this machine), 'ray' or a RayCluster(...) (a Ray cluster), or 'slurm' "
        "or a SlurmCluster(...) (a Slurm job)",
        TypeError if not isinstance(value, str) else ValueError,
    )


def check_cluster_settings(cluster: Any, given: Mapping[str, Any]) -> None:
    """Refuse the launch settings that mean nothing where ``cluster`` runs the ranks."""
    if isinstance(cluster, SlurmCluster):
        check_slurm_settings(cluster, dict(given))
    else:
        check_ray_settings(cluster, given)
