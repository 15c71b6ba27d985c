"""The config panel: pick the launch settings, see the plan, start and stop runs with buttons.

:class:`LaunchPanel` sits above the launcher and the views, and wires one to the other; nothing
imports it. The form, the plan's table, the buttons and the run's panels are the view's
(:class:`notebook_launcher.ui.config_panel.ConfigPanel`, which never imports the launcher): it
hands the form's values to this panel, which keeps a :class:`LaunchSettings` record (those
values over the options it was given), plans it with :func:`notebook_launcher.plan_launch` and
runs it in the background as :func:`notebook_launcher.launch_in_background` does, on this machine
or, where the form says so, on a Ray cluster or Slurm (a :class:`RayCluster` or
:class:`SlurmCluster` made of its fields, the settings that mean nothing there left at their
"not used" values). The Launch
button returns at once (the run is supervised from a background thread, as button clicks are not
handled while a cell runs), so Stop works during a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .backends import backend_for, launch_backend
from .launch.background import LaunchHandle, start_in_background
from .launch.launchers import START_METHODS
from .launch.launchers.ray.settings import NOT_ON_A_CLUSTER, PLACEMENTS, RayCluster
from .launch.launchers.slurm.settings import SlurmCluster
from .launch.planning.planner import most_processes, plan_launch
from .launch.planning.preflight import check_args, check_function
from .launch.planning.settings import DEFAULTS, OUTPUT_CHOICES, LaunchSettings
from .launch.result import LaunchResult
from .ui.cluster_form import SLURM_FIELDS, is_slurm
from .ui.config_panel import SETTINGS, ConfigPanel
from .utils.enums import MIXED_PRECISION_CHOICES
from .utils.validation import invalid

CHOICES = {
    "mixed_precision": MIXED_PRECISION_CHOICES,
    "start_method": START_METHODS,
    "output": OUTPUT_CHOICES,
    "placement": PLACEMENTS,
}
# On a cluster: the settings left at the value that says "not used", and the form's ones disabled.
UNUSED_ON_A_CLUSTER = {name: unused for name, unused, _ in NOT_ON_A_CLUSTER}
LOCAL_ONLY = tuple(name for name in UNUSED_ON_A_CLUSTER if name in SETTINGS)
MOST_CLUSTER_RANKS = 4096  # the ranks the form offers on a cluster


def process_group_backend(device: str) -> str:
    """The process-group backend a device's workers form their group with ("gloo", "nccl" ...)."""
    return backend_for(device).process_group_backend


def cluster_fields(cluster: RayCluster | SlurmCluster | None) -> dict[str, Any] | None:
    """What the form shows of a cluster: None (this machine); a Ray cluster's address, resources
    and placement (its runtime_env and timeouts stay as the panel was given them); a Slurm job's
    partition, nodes, tasks per node and time (its other settings stay as given)."""
    if cluster is None:
        return None
    if isinstance(cluster, SlurmCluster):
        return {name: getattr(cluster, name) for name in SLURM_FIELDS}
    if not isinstance(cluster, RayCluster):
        raise invalid("cluster", cluster, "expected None, a RayCluster or a SlurmCluster")
    return {
        "address": cluster.address,
        "resources_per_process": cluster.resources,
        "placement": cluster.placement,
    }


def _of_view(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.view, name), doc=doc)


class LaunchPanel:
    """Settings, the resolved plan, Launch and Stop buttons, and the live panels of the run.

    Args:
        function: the training function (passed, not called).
        args: its positional arguments.
        num_processes: initial number of processes (default: one per GPU, else per usable
            core).
        mixed_precision, start_method, timeout, stall_timeout, output: initial settings, as
            for :func:`notebook_launcher` (a timeout of None shows as 0).
        max_processes: the most processes the form accepts on this machine; default what
            :func:`notebook_launcher` accepts there (one per GPU, else a few per usable core);
            on a cluster (Ray, Slurm) the form accepts up to 4096 ranks. A value beyond it, or
            under 1, is refused in red beside the field, and Launch waits for a valid one.
        **options: any other :func:`notebook_launcher` keyword, passed to every launch;
            ``cluster="ray"`` or ``cluster=RayCluster(...)`` starts the form on a Ray cluster
            (its ``runtime_env`` and timeouts kept for every Ray launch); ``cluster="slurm"`` or
            ``cluster=SlurmCluster(...)`` starts it on Slurm (its options other than the form's
            kept for every Slurm launch).

    The form's "where" chooses this machine, a Ray cluster or Slurm. On a Ray cluster: its
    address (empty: as ``ray.init()`` chooses), CPUs and GPUs per rank, custom resources
    (``slot=1, pair=0.5``) and placement. On Slurm: the partition (empty: Slurm's default), nodes
    and tasks per node (0: worked out from the processes) and the time limit (empty: the
    partition's). While a cluster is chosen, the settings that mean nothing there (the start
    method) are disabled.

    Once a run ends its live panels leave the widget, and a static copy of its final table and
    charts is shown under it (kept in the saved notebook).

    Attributes:
        widget: the panel (an ipywidgets ``VBox``).
        handle: the :class:`LaunchHandle` of the latest run, or None.
        view: the :class:`~notebook_launcher.ui.config_panel.ConfigPanel` drawing it; its
            widgets (``num_processes``, ``plan``, ``launch_button``, ``stop_button``,
            ``message``, ``runs`` ...) are the panel's attributes too.

    Example:
        >>> LaunchPanel(train, args=(3e-4,), num_processes=2)  # shown as the cell's output
    """

    def __init__(
        self,
        function: Callable[..., Any],
        args: tuple = (),
        *,
        num_processes: int | None = None,
        mixed_precision: str = DEFAULTS.mixed_precision,
        start_method: str = DEFAULTS.start_method,
        timeout: float | None = DEFAULTS.timeout,
        stall_timeout: float | None = DEFAULTS.stall_timeout,
        output: str = DEFAULTS.output,
        max_processes: int | None = None,
        **options: Any,
    ) -> None:
        check_function(function)
        self.args = check_args(args)
        self.function = function
        if max_processes is None:
            max_processes, why = most_processes()
        else:
            why = f" (this panel's max_processes={max_processes!r})"
        if isinstance(max_processes, bool) or not isinstance(max_processes, int):
            raise TypeError(f"max_processes={max_processes!r} is not valid: expected an int >= 1")
        if max_processes < 1:
            raise ValueError(f"max_processes={max_processes!r} is not valid: expected an int >= 1")
        if num_processes is None:
            # one per device (or usable core), within the panel's bound
            num_processes = min(launch_backend().device_count(), max_processes)
        if "ui" in options:
            raise TypeError("ui= is not valid here: the panel always shows widgets")
        # Every setting is checked once now, so a bad one is reported where it was written;
        # the widgets then change only their own settings of this record.
        self.base = LaunchSettings.from_options(
            num_processes=num_processes,
            mixed_precision=mixed_precision,
            start_method=start_method,
            timeout=timeout,
            stall_timeout=stall_timeout,
            output=output,
            **options,
        )
        plan_launch(self.base)  # what this machine cannot do is refused here too
        if num_processes > max_processes and self.base.cluster is None:
            raise ValueError(
                f"num_processes={num_processes!r} is not valid: this panel offers at most "
                f"max_processes={max_processes}"
            )
        self.view = ConfigPanel(
            getattr(function, "__qualname__", repr(function)),
            {name: getattr(self.base, name) for name in SETTINGS}
            | {"cluster": cluster_fields(self.base.cluster)},
            CHOICES,
            max_processes,
            plan=lambda values: plan_launch(self._settings(values)),
            backend=process_group_backend,
            start=lambda values: self._start(self._settings(values)),
            cluster_max_processes=max(MOST_CLUSTER_RANKS, num_processes),
            local_only=LOCAL_ONLY,
            max_processes_why=why,
        )

    # The view's widgets and run, read through the panel.
    widget = _of_view("widget", "The panel (an ipywidgets ``VBox``).")
    title = _of_view("title", "The title: the function's name.")
    num_processes = _of_view("num_processes", "The processes widget.")
    mixed_precision = _of_view("mixed_precision", "The mixed precision widget.")
    start_method = _of_view("start_method", "The start method widget.")
    timeout = _of_view("timeout", "The timeout widget (0: none).")
    stall_timeout = _of_view("stall_timeout", "The stall timeout widget (0: none).")
    output = _of_view("output", "The output widget.")
    where = _of_view("where", 'Where the run goes: "this machine", "Ray cluster" or "Slurm".')
    address = _of_view("address", "The Ray cluster's address (empty: as ray.init() chooses).")
    cpus = _of_view("cpus", "The CPUs each rank reserves on the Ray cluster.")
    gpus = _of_view("gpus", "The GPUs each rank reserves on the Ray cluster (0, 1 or a fraction).")
    custom_resources = _of_view("custom_resources", "Other resources per rank: 'slot=1, pair=0.5'.")
    placement = _of_view("placement", 'How the ranks are placed: "pack" or "spread".')
    partition = _of_view("partition", "The Slurm partition (empty: Slurm's default).")
    nodes = _of_view("nodes", "The Slurm job's nodes (0: from the processes).")
    tasks_per_node = _of_view("tasks_per_node", "Ranks per Slurm node (0: from the processes).")
    time_limit = _of_view("time_limit", "The Slurm job's time limit, '1:00:00' (empty: none).")
    plan = _of_view("plan", "The resolved plan (HTML), or why the settings are refused.")
    launch_button = _of_view("launch_button", "The Launch button.")
    stop_button = _of_view("stop_button", "The Stop button.")
    message = _of_view("message", "What the latest run did, beside the buttons.")
    runs = _of_view("runs", "The live panels of the run going on.")
    handle = _of_view("handle", "The :class:`LaunchHandle` of the latest run, or None.")
    display_id = _of_view("display_id", "Of the output under the panel that keeps a run.")
    running = _of_view("running", "True while a run goes on.")

    @property
    def result(self) -> LaunchResult | None:
        """The :class:`LaunchResult` of the latest run once it finished; None before, while it
        runs, or when it failed or was stopped (``panel.handle.exception`` says why)."""
        handle = self.handle
        return handle.result if handle is not None else None

    def _settings(self, values: dict[str, Any]) -> LaunchSettings:
        fields = values["cluster"]
        if fields is None:
            return self.base.replace(**values)
        # The form's fields over the cluster the panel was given, if of the kind chosen (a Ray
        # cluster's runtime_env and timeouts, a Slurm job's other options), else its defaults.
        kind = SlurmCluster if is_slurm(fields) else RayCluster
        given = self.base.cluster if isinstance(self.base.cluster, kind) else kind()
        cluster = dataclasses.replace(given, **fields)
        return self.base.replace(**values | UNUSED_ON_A_CLUSTER | {"cluster": cluster})

    def settings(self) -> LaunchSettings:
        """The current settings: the widgets' values over the options the panel was given."""
        return self._settings(self.view.values())

    def _start(self, settings: LaunchSettings) -> LaunchHandle:
        return start_in_background(
            self.function, self.args, settings.replace(ui="widgets"), show=False
        )

    # -- running ----------------------------------------------------------------------------------

    def launch(self) -> LaunchHandle | None:
        """Start a run with the current settings (what the Launch button does).

        Returns:
            The run's handle, or None when the settings were refused (the panel says why).
        """
        return self.view.launch()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop the running launch (what the Stop button does); True once it has ended."""
        return self.view.stop(timeout)

    # -- showing ----------------------------------------------------------------------------------

    def static_html(self) -> str:
        """The panel's settings as plain HTML: what a saved or exported notebook (no widget
        state) shows in its place."""
        return self.view.static_html(self.settings())

    def _ipython_display_(self) -> None:
        # The widget where the frontend has its state; the settings as HTML and text elsewhere
        # (a saved notebook reopened, an HTML export).
        self.view.show(self.static_html(), repr(self))

    def __repr__(self) -> str:
        name = getattr(self.function, "__qualname__", "function")
        state = "running" if self.running else "idle"
        return f"LaunchPanel({name}, {state})"
