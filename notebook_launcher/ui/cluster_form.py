"""Where the config panel's launch runs: this machine, a Ray cluster with its address, what each
rank reserves and how the ranks are placed, or a Slurm job with its partition, nodes, tasks per
node and time limit.

The form yields plain values (None for this machine; for a Ray cluster a dict of its ``address``,
``resources_per_process`` and ``placement``; for Slurm a dict of :data:`SLURM_FIELDS`); the panel
above turns them into its cluster record, whose own checks speak for what the form cannot tell.
What only the form knows is checked here: a blank address, the custom resources' text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..utils.validation import invalid

THIS_MACHINE = "this machine"
RAY_CLUSTER = "Ray cluster"
SLURM = "Slurm"
WHERE = (THIS_MACHINE, RAY_CLUSTER, SLURM)
# The Slurm job's fields the form edits (the rest comes from the cluster the panel was given).
SLURM_FIELDS = ("partition", "nodes", "tasks_per_node", "time")
MOST_PER_FIELD = 100_000  # the most nodes, or tasks per node, the form takes
CUSTOM = "custom resources"
OWN_FIELDS = {"CPU": "CPUs per rank", "GPU": "GPUs per rank"}
ADDRESSES = "'auto', 'host:port' or 'ray://host:port'"


def parse_resources(text: str) -> dict[str, float]:
    """``'slot=1, pair=0.5'`` as ``{'slot': 1.0, 'pair': 0.5}``; an empty text as ``{}``."""
    found: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, amount = (piece.strip() for piece in part.partition("="))
        if not sep or not name or any(c.isspace() for c in name):
            raise invalid(
                CUSTOM,
                text,
                "expected name=amount pairs separated by commas, e.g. 'slot=1, pair=0.5'",
            )
        if name in OWN_FIELDS:
            raise invalid(CUSTOM, text, f"give {name} in its own field, {OWN_FIELDS[name]!r}")
        if name in found:
            raise invalid(CUSTOM, text, f"{name!r} is given twice")
        try:
            found[name] = float(amount)
        except ValueError:
            found[name] = math.nan
        if not math.isfinite(found[name]) or found[name] < 0:
            raise invalid(
                CUSTOM, text, f"the amount of {name!r} must be a number >= 0, got {amount!r}"
            )
    return found


def resources_text(resources: Mapping[str, float]) -> str:
    """The inverse of :func:`parse_resources`: ``{'slot': 1.0}`` as ``'slot=1'``."""
    return ", ".join(f"{name}={amount:g}" for name, amount in resources.items())


def cluster_address(text: str) -> str | None:
    """The address field: empty for ``ray.init()``'s own choice, else the address given."""
    if not text:
        return None
    if not text.strip():
        raise invalid(
            "address",
            text,
            f"leave it empty (ray.init() chooses: RAY_ADDRESS, else a local instance) or give "
            f"{ADDRESSES}",
        )
    return text.strip()


def where_text(cluster: Any, ranks: int) -> str:
    """Where a launch runs, for the plan and the settings' table.

    Args:
        cluster: None (this machine), or a cluster record: ``address`` (None: ``ray.init()``'s
            choice) and ``describe()`` (what each rank reserves, ``'{CPU: 1}'``).
        ranks: how many ranks it starts.
    """
    if cluster is None:
        return THIS_MACHINE
    if hasattr(cluster, "where"):  # a cluster that says it itself (Slurm)
        return cluster.where(ranks)
    address = f"address {cluster.address}" if cluster.address else "address as ray.init() chooses"
    return f"{RAY_CLUSTER} ({address}), {ranks} ranks × {cluster.describe()}"


def is_slurm(fields: Mapping[str, Any] | None) -> bool:
    """Whether the form's cluster value (or initial fields) is a Slurm job's."""
    return fields is not None and "partition" in fields


def _where(initial: Mapping[str, Any] | None) -> str:
    if initial is None:
        return THIS_MACHINE
    return SLURM if is_slurm(initial) else RAY_CLUSTER


class ClusterForm:
    """The "where" choice and the fields of the cluster chosen: a Ray cluster's, or a Slurm
    job's.

    Args:
        initial: None (this machine), a Ray cluster's ``address``, ``resources_per_process`` and
            ``placement``, or a Slurm job's :data:`SLURM_FIELDS` to start from.
        placements: the placements offered, the default first.
        label_style: the style of the fields' labels.

    Attributes:
        widget: the form (a ``VBox``): ``where``, then the Ray cluster's fields (``address``,
            ``cpus``, ``gpus``, ``custom_resources``, ``placement``) or the Slurm job's
            (``partition``, ``nodes``, ``tasks_per_node``, ``time_limit``; 0 or empty: as the
            cluster given, or Slurm, decides), each shown only while chosen.
        controls: every widget whose value the form reads.
    """

    def __init__(
        self,
        initial: Mapping[str, Any] | None,
        placements: Sequence[str],
        label_style: Mapping[str, str],
    ) -> None:
        import ipywidgets as widgets

        given = dict(initial or {}) if not is_slurm(initial) else {}
        slurm = dict(initial or {}) if is_slurm(initial) else {}
        resources = dict(given.get("resources_per_process") or {"CPU": 1.0})
        style = dict(label_style)
        self.where = widgets.Dropdown(
            options=list(WHERE),
            value=_where(initial),
            description="where",
            style=style,
        )
        self.address = widgets.Text(
            value=given.get("address") or "",
            placeholder="empty: RAY_ADDRESS, else local",
            description="address",
            style=style,
        )
        self.cpus = widgets.FloatText(
            value=resources.pop("CPU", 0.0), description=OWN_FIELDS["CPU"], style=style
        )
        self.gpus = widgets.FloatText(
            value=resources.pop("GPU", 0.0), description=OWN_FIELDS["GPU"], style=style
        )
        self.custom_resources = widgets.Text(
            value=resources_text(resources),
            placeholder="e.g. slot=1, pair=0.5",
            description=CUSTOM,
            style=style,
        )
        self.placement = widgets.Dropdown(
            options=list(placements),
            value=given.get("placement", placements[0]),
            description="placement",
            style=style,
        )
        self.fields = widgets.VBox(
            [self.address, self.cpus, self.gpus, self.custom_resources, self.placement]
        )
        # 0 or empty: as the SlurmCluster given (or Slurm) decides.
        count = {"min": 0, "max": MOST_PER_FIELD, "style": style}
        self.partition = widgets.Text(
            value=slurm.get("partition") or "",
            placeholder="empty: Slurm's default",
            description="partition",
            style=style,
        )
        self.nodes = widgets.BoundedIntText(
            value=slurm.get("nodes") or 0, description="nodes (0: any)", **count
        )
        self.tasks_per_node = widgets.BoundedIntText(
            value=slurm.get("tasks_per_node") or 0, description="tasks per node (0: any)", **count
        )
        self.time_limit = widgets.Text(
            value=slurm.get("time") or "",
            placeholder="e.g. 1:00:00; empty: the partition's",
            description="time limit",
            style=style,
        )
        self.slurm_fields = widgets.VBox(
            [self.partition, self.nodes, self.tasks_per_node, self.time_limit]
        )
        self.controls = (self.where, *self.fields.children, *self.slurm_fields.children)
        self.widget = widgets.VBox([self.where, self.fields, self.slurm_fields])
        self.where.observe(lambda change: self._show_fields(), names="value")
        self._show_fields()

    @property
    def on_cluster(self) -> bool:
        """Whether the run goes to a cluster (Ray or Slurm), not this machine."""
        return self.where.value != THIS_MACHINE

    def _show_fields(self) -> None:
        self.fields.layout.display = None if self.where.value == RAY_CLUSTER else "none"
        self.slurm_fields.layout.display = None if self.where.value == SLURM else "none"

    def observe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever a value of the form changes."""
        for control in self.controls:
            control.observe(lambda change: callback(), names="value")

    def value(self) -> dict[str, Any] | None:
        """None on this machine; on a Ray cluster its ``address``, ``resources_per_process`` and
        ``placement``; on Slurm the job's :data:`SLURM_FIELDS` (None where left at 0 or empty);
        raises ValueError naming the field whose text is refused."""
        if not self.on_cluster:
            return None
        if self.where.value == SLURM:
            return {
                "partition": self.partition.value.strip() or None,
                "nodes": self.nodes.value or None,
                "tasks_per_node": self.tasks_per_node.value or None,
                "time": self.time_limit.value.strip() or None,
            }
        return {
            "address": cluster_address(self.address.value),
            "resources_per_process": self.resources(),
            "placement": self.placement.value,
        }

    def resources(self) -> dict[str, float]:
        """What each rank reserves: the CPUs and GPUs fields (left out at 0, unless nothing else
        is asked for) and the custom resources."""
        chosen = {
            "CPU": self.cpus.value,
            "GPU": self.gpus.value,
            **parse_resources(self.custom_resources.value),
        }
        kept = {name: amount for name, amount in chosen.items() if amount or name not in OWN_FIELDS}
        return kept or chosen
