"""The config panel's view: the settings form, the resolved plan, Launch and Stop buttons, and the
live panels of the run under them.

It knows nothing of the launcher. The choices, the initial values and the most processes come in
as plain data; planning the settings and starting a run come in as callables, each taking the
form's values as a plain dict (:data:`SETTINGS`, a timeout of 0 read as None, ``cluster`` None for
this machine or the Ray cluster's or Slurm job's fields, :mod:`.cluster_form`). The
:class:`~notebook_launcher.LaunchPanel` passes them: the launcher's records and checks stay on its
side, and ``ui`` never imports ``launch``. Nothing here imports ipywidgets until the form is built.
"""

from __future__ import annotations

import html
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..utils.environment import in_kernel
from ..utils.validation import check_int_in, short_repr
from .cluster_form import ClusterForm, where_text
from .widgets import widget_bundle

# The settings the form edits, in its order: the keys of ``values()``, of the initial values, and
# the attributes the static copy (``static_html``) reads.
SETTINGS = (
    "num_processes",
    "mixed_precision",
    "start_method",
    "timeout",
    "stall_timeout",
    "output",
    "cluster",
)
# The cluster form's widgets, the panel's attributes too.
FORM_FIELDS = (
    "where",
    "address",
    "cpus",
    "gpus",
    "custom_resources",
    "placement",
    "partition",
    "nodes",
    "tasks_per_node",
    "time_limit",
)
CHOSEN = ("mixed_precision", "start_method", "output", "placement")  # picked from a list
LABEL_STYLE = {"description_width": "130px"}


class RunHandle(Protocol):
    """What the panel uses of a started run (a :class:`~notebook_launcher.LaunchHandle`).

    ``view`` is its widget view: ``widget`` while it runs, ``final_panel()`` and ``close()``
    once it ended; ``model`` its :class:`~notebook_launcher.ui.RunModel`; ``status`` one of
    ``"running"``, ``"finished"``, ``"stopped"``, ``"failed"``; ``result.duration`` in seconds.
    """

    view: Any
    model: Any
    done: bool
    status: str
    result: Any
    exception: BaseException | None

    def stop(self, timeout: float | None = ...) -> bool: ...

    def add_done_callback(self, callback: Callable[[Any], None]) -> None: ...


def port_state(host: str, port: int) -> str:
    """'free' or 'taken', checked by binding the port for a moment."""
    if port == 0:
        return "any free port"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return "taken: a free port will be used"
    return "free"


def seconds_text(value: float | None) -> str:
    return "none" if value is None else f"{value:g} s"


def rows_html(rows: Sequence[tuple[str, str]], css_class: str) -> str:
    """Label and value pairs as a small HTML table (the values escaped)."""
    cells = "".join(
        f'<tr><td style="padding:0 8px 0 0;opacity:0.7">{k}</td><td>{html.escape(v)}</td></tr>'
        for k, v in rows
    )
    return f'<table class="{css_class}" style="font-size:12px">{cells}</table>'


def plan_html(plan: Any, backend: str) -> str:
    """A resolved plan as a small HTML table.

    Args:
        plan: any object with a plan's fields (``world_size``, ``start_method``, ``device``,
            ``num_processes``, ``master_addr``, ``requested_port``, ``threads_per_process``,
            ``mixed_precision``, ``timeout``, ``stall_timeout``, ``output``, and ``cluster``:
            None, or a cluster record as :func:`~.cluster_form.where_text` reads it, with its
            ``placement``).
        backend: the process-group backend its device uses (``"gloo"``, ``"nccl"`` ...).
    """
    cluster = getattr(plan, "cluster", None)
    rows = [("where", where_text(cluster, plan.world_size))]
    if cluster is None:
        port = f"{plan.requested_port} ({port_state(plan.master_addr, plan.requested_port)})"
    else:  # rank 0's actor hosts the rendezvous, on its node (on Slurm: this kernel)
        port = getattr(cluster, "store_text", "a free port on rank 0's node")
        rows.append(("placement", cluster.placement))
    rows += [
        ("processes", f"{plan.world_size} ({plan.start_method})"),
        ("devices", f"{plan.device} × {plan.num_processes}"),
        ("backend", backend),
        ("port", port),
        ("threads per process", str(plan.threads_per_process)),
        ("mixed precision", plan.mixed_precision),
        ("timeout", seconds_text(plan.timeout)),
        ("stall timeout", seconds_text(plan.stall_timeout)),
        ("output", plan.output),
    ]
    return rows_html(rows, "nl-plan")


def error_html(exc: BaseException) -> str:
    """An exception's type and first line, in red."""
    first = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return f'<span class="nl-run-error" style="color:#d62728">{html.escape(text)}</span>'


class ConfigPanel:
    """The form, the plan, Launch and Stop, and the run's panels, as one ipywidgets ``VBox``.

    Args:
        name: the function's name, shown in the title.
        values: the initial value of each of :data:`SETTINGS` (a timeout of None shows as 0;
            ``cluster``: None for this machine, the Ray cluster's ``address``,
            ``resources_per_process`` and ``placement``, or the Slurm job's fields,
            :data:`~.cluster_form.SLURM_FIELDS`).
        choices: the options of each setting picked from a list (:data:`CHOSEN`).
        max_processes: the most processes the form accepts on this machine.
        max_processes_why: where that bound comes from, in parentheses after it in the message
            of a value over it (e.g. ``" (4 per usable core)"``).
        cluster_max_processes: the most it accepts on a cluster (default: ``max_processes``).
        local_only: the settings that mean nothing on a cluster: disabled while it is chosen.
        plan: the form's values -> the resolved plan (for :func:`plan_html`); raises TypeError or
            ValueError, shown in place of the plan, for values it refuses.
        backend: a plan's device -> its process-group backend's name.
        start: the form's values -> a started :class:`RunHandle` whose view is widgets not yet
            shown; whatever it raises is shown beside the buttons.

    The processes field takes any int; one under 1 or over the bound where the run goes is kept
    as typed, refused in red beside the field (``processes_note``), and Launch is disabled until
    it is changed.

    Once a run ends its live panels leave the form, and a static copy of its final table and
    charts is shown in the output under the panel (``show()`` made it), kept in a saved notebook.

    Attributes:
        widget: the panel (a ``VBox``): the title, the settings' widgets (``where`` and, on a Ray
            cluster, its fields: ``address``, ``cpus``, ``gpus``, ``custom_resources``,
            ``placement``; on Slurm, ``partition``, ``nodes``, ``tasks_per_node``,
            ``time_limit``) beside ``plan`` (``num_processes`` with ``processes_note`` beside
            it), then
            ``launch_button``, ``stop_button`` and ``message``, then ``runs``.
        handle: the latest run's handle, or None.
        display_id: of the output under the panel that keeps a run (None until shown).
    """

    def __init__(
        self,
        name: str,
        values: Mapping[str, Any],
        choices: Mapping[str, Sequence[str]],
        max_processes: int,
        *,
        plan: Callable[[dict[str, Any]], Any],
        backend: Callable[[str], str],
        start: Callable[[dict[str, Any]], RunHandle],
        cluster_max_processes: int | None = None,
        local_only: Sequence[str] = (),
        max_processes_why: str = "",
    ) -> None:
        import ipywidgets as widgets  # only once a panel is built: optional outside Jupyter

        self.name = name
        self._plan = plan
        self._backend = backend
        self._start = start
        self._most = (max_processes, cluster_max_processes or max_processes)
        self._most_why = (max_processes_why, " (the ranks this form offers on a Ray cluster)")
        self._local_only = tuple(local_only)
        self.handle: RunHandle | None = None
        self.display_id: str | None = None
        self.title = widgets.HTML(f"<b>Launch</b> <code>{html.escape(name)}</code>")
        # Not a BoundedIntText: that one silently clamps what is typed into its bounds.
        self.num_processes = widgets.IntText(
            value=values["num_processes"], description="processes", style=LABEL_STYLE
        )
        self.processes_note = widgets.HTML()
        self.mixed_precision = self._chosen(values, choices, "mixed_precision", "mixed precision")
        self.start_method = self._chosen(values, choices, "start_method", "start method")
        self.timeout = self._seconds(values, "timeout", "timeout (s, 0: none)")
        self.stall_timeout = self._seconds(values, "stall_timeout", "stall (s, 0: none)")
        self.output = self._chosen(values, choices, "output", "output")
        self.where_form = ClusterForm(values.get("cluster"), choices["placement"], LABEL_STYLE)
        for name in FORM_FIELDS:
            setattr(self, name, getattr(self.where_form, name))
        self.plan = widgets.HTML()
        self.launch_button = widgets.Button(description="Launch", button_style="success")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", disabled=True)
        self.message = widgets.HTML()
        self.runs = widgets.VBox()
        controls = [getattr(self, setting) for setting in SETTINGS if setting != "cluster"]
        # The "where" choice first: its fields and what it disables are in place before the plan.
        self.where.observe(lambda change: self._where_changed(), names="value")
        for control in controls:
            control.observe(lambda change: self.refresh_plan(), names="value")
        self.where_form.observe(self.refresh_plan)
        self.launch_button.on_click(lambda button: self.launch())
        self.stop_button.on_click(lambda button: self.stop())
        buttons = widgets.HBox([self.launch_button, self.stop_button, self.message])
        rows = [
            widgets.HBox([control, self.processes_note])
            if control is self.num_processes
            else control
            for control in controls
        ]
        form = widgets.VBox([self.where_form.widget, *rows])
        settings = widgets.HBox([form, self.plan])
        self.widget = widgets.VBox([self.title, settings, buttons, self.runs])
        self._where_changed()
        self.refresh_plan()

    def _where_changed(self) -> None:
        """Disable what means nothing where the run goes (the form's observer plans again, and
        checks the processes against the bound of where the run now goes)."""
        on_cluster = self.where_form.on_cluster
        for setting in self._local_only:
            getattr(self, setting).disabled = on_cluster

    @property
    def most_processes(self) -> int:
        """The most processes the form accepts where the run goes."""
        return self._most[self.where_form.on_cluster]

    def processes_refused(self) -> str:
        """Why the processes field's value is refused where the run goes, or "" if it is not."""
        on_cluster = self.where_form.on_cluster
        try:
            check_int_in(
                "num_processes",
                self.num_processes.value,
                1,
                self._most[on_cluster],
                self._most_why[on_cluster],
            )
        except (TypeError, ValueError) as exc:
            return str(exc)
        return ""

    @staticmethod
    def _chosen(
        values: Mapping[str, Any], choices: Mapping[str, Sequence[str]], setting: str, label: str
    ) -> Any:
        import ipywidgets as widgets

        return widgets.Dropdown(
            options=list(choices[setting]),
            value=values[setting],
            description=label,
            style=LABEL_STYLE,
        )

    @staticmethod
    def _seconds(values: Mapping[str, Any], setting: str, label: str) -> Any:
        """A number of seconds, None shown as 0."""
        import ipywidgets as widgets

        return widgets.FloatText(value=values[setting] or 0.0, description=label, style=LABEL_STYLE)

    def values(self) -> dict[str, Any]:
        """The form's values, one per :data:`SETTINGS` (a timeout of 0 read as None)."""
        return {
            "num_processes": self.num_processes.value,
            "mixed_precision": self.mixed_precision.value,
            "start_method": self.start_method.value,
            "timeout": self.timeout.value or None,
            "stall_timeout": self.stall_timeout.value or None,
            "output": self.output.value,
            "cluster": self.where_form.value(),
        }

    def refresh_plan(self) -> None:
        """Draw the plan of the form's values, or why they are refused; a refused number of
        processes is said beside its field, and Launch waits for a valid one."""
        refused = self.processes_refused()
        self.processes_note.value = (
            f'<span class="nl-field-error" style="color:#d62728">{html.escape(refused)}</span>'
            if refused
            else ""
        )
        self.launch_button.disabled = bool(refused) or self.running
        if refused:
            self.plan.value = '<span style="opacity:0.7">no plan: see the processes</span>'
            return
        try:
            plan = self._plan(self.values())  # the form's own checks raise here too
        except (TypeError, ValueError) as exc:
            self.plan.value = f'<span style="color:#d62728">{html.escape(str(exc))}</span>'
            return
        self.plan.value = plan_html(plan, self._backend(plan.device))

    # -- running ----------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.handle is not None and not self.handle.done

    def launch(self) -> RunHandle | None:
        """Start a run with the form's values (what the Launch button does).

        Returns:
            The run's handle (the running one's, while a run goes on), or None when starting
            raised (the panel says why).
        """
        if self.running:
            return self.handle
        refused = self.processes_refused()
        if refused:  # Launch is disabled then; a call from code is refused the same way
            self.message.value = error_html(ValueError(refused))
            return None
        try:
            handle = self._start(self.values())
        except Exception as exc:  # shown in the panel: a button has nowhere else to raise to
            self.message.value = error_html(exc)
            return None
        self.handle = handle
        self._keep({})  # the previous run's copy gives way to the live panels
        self.runs.children = (handle.view.widget,)
        self.message.value = "running…"
        self.launch_button.disabled = True
        self.stop_button.disabled = False
        handle.add_done_callback(self._ended)
        return handle

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop the running launch (what the Stop button does); True once it has ended."""
        if self.handle is None:
            return True
        self.stop_button.disabled = True
        self.message.value = "stopping…"
        return self.handle.stop(timeout)

    def _ended(self, handle: RunHandle) -> None:
        if self._keep(handle.view.final_panel()._repr_mimebundle_()):
            self.runs.children = ()
            handle.view.close()
        self.launch_button.disabled = bool(self.processes_refused())
        self.stop_button.disabled = True
        # The message comes last: once it says how the run ended, the panel is ready again.
        if handle.status == "finished":
            shown = html.escape(short_repr(handle.result.values))
            self.message.value = (
                f"finished in {handle.result.duration:.1f} s: <code>{shown}</code> "
                "(<code>panel.result</code>)"
            )
        elif handle.status == "stopped":  # the user's own stop: not an error
            self.message.value = (
                '<span class="nl-run-stopped" style="color:#6b7280">'
                f"stopped after {handle.model.elapsed():.1f} s</span>"
            )
        else:
            self.message.value = error_html(handle.exception)

    def _keep(self, bundle: dict[str, Any]) -> bool:
        """Show ``bundle`` in the output under the panel; False where the panel is not shown."""
        if self.display_id is None or not in_kernel():
            return False
        from IPython.display import update_display

        update_display(bundle, raw=True, display_id=self.display_id)
        return True

    # -- showing ----------------------------------------------------------------------------------

    def static_html(self, settings: Any) -> str:
        """``settings`` (any object with the attributes :data:`SETTINGS`, ``cluster`` as
        :func:`plan_html` reads it) as plain HTML: what a saved or exported notebook (no widget
        state) shows in the panel's place."""
        cluster = settings.cluster
        rows = [
            ("where", where_text(cluster, settings.num_processes)),
            ("processes", str(settings.num_processes)),
            ("mixed precision", settings.mixed_precision),
            ("start method", settings.start_method)
            if cluster is None
            else ("placement", cluster.placement),
            ("timeout", seconds_text(settings.timeout)),
            ("stall timeout", seconds_text(settings.stall_timeout)),
            ("output", settings.output),
        ]
        return (
            f'<div class="nl-launch-panel"><b>Launch</b> <code>{html.escape(self.name)}</code>'
            f"{rows_html(rows, 'nl-settings')}</div>"
        )

    def show(self, static_html: str, text: str) -> None:
        """Display the panel, with ``static_html`` and ``text`` for where its widget state is
        missing (a saved notebook reopened, an HTML export), and an output under it for runs."""
        from IPython.display import display

        bundle = {**widget_bundle(self.widget), "text/html": static_html, "text/plain": text}
        display(bundle, raw=True)
        # Below it, an output with no data (drawn as nothing) that a run's final panel fills.
        self.display_id = self.display_id or f"notebook_launcher-panel-{uuid.uuid4().hex}"
        display({}, raw=True, display_id=self.display_id)
