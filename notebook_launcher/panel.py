"""The config panel: pick the launch settings, see the plan, start and stop runs with buttons.

It sits above the launcher: it keeps a :class:`LaunchSettings` record (the widgets' values over
the options it was given), plans it with :func:`notebook_launcher.plan_launch` and runs it
in the background as :func:`notebook_launcher.launch_in_background` does; the launcher never
imports it. The Launch button returns at once (the run is supervised from a
background thread, as button clicks are not handled while a cell runs), so Stop works during a run.
"""

from __future__ import annotations

import html
import socket
import uuid
from collections.abc import Callable
from typing import Any

from .backends import backend_for, launch_backend
from .launch.background import LaunchHandle, start_in_background
from .launch.launchers import START_METHODS
from .launch.plan import LaunchPlan
from .launch.planner import plan_launch
from .launch.preflight import check_args, check_function
from .launch.settings import DEFAULTS, OUTPUT_CHOICES, LaunchSettings
from .ui.widgets import widget_bundle
from .utils.enums import MIXED_PRECISION_CHOICES
from .utils.environment import in_kernel


def machine_processes() -> int:
    """The most processes this machine runs well: one per device (GPU, TPU core, usable core)."""
    return launch_backend().device_count()


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


def plan_html(plan: LaunchPlan) -> str:
    """The resolved plan as a small HTML table."""
    backend = backend_for(plan.device).process_group_backend
    devices = f"{plan.device} × {plan.num_processes}"
    rows = [
        ("processes", f"{plan.world_size} ({plan.start_method})"),
        ("devices", devices),
        ("backend", backend),
        ("port", f"{plan.requested_port} ({port_state(plan.master_addr, plan.requested_port)})"),
        ("threads per process", str(plan.threads_per_process)),
        ("mixed precision", plan.mixed_precision),
        ("timeout", "none" if plan.timeout is None else f"{plan.timeout:g} s"),
        ("stall timeout", "none" if plan.stall_timeout is None else f"{plan.stall_timeout:g} s"),
        ("output", plan.output),
    ]
    cells = "".join(
        f'<tr><td style="padding:0 8px 0 0;opacity:0.7">{k}</td><td>{html.escape(v)}</td></tr>'
        for k, v in rows
    )
    return f'<table class="nl-plan" style="font-size:12px">{cells}</table>'


class LaunchPanel:
    """Settings, the resolved plan, Launch and Stop buttons, and the live panels of the run.

    Args:
        function: the training function (passed, not called).
        args: its positional arguments.
        num_processes: initial number of processes (default: what the machine has).
        mixed_precision, start_method, timeout, stall_timeout, output: initial settings, as
            for :func:`notebook_launcher` (a timeout of None shows as 0).
        max_processes: the most processes offered; default one per GPU, else per usable core.
        **options: any other :func:`notebook_launcher` keyword, passed to every launch.

    Once a run ends its live panels leave the widget, and a static copy of its final table and
    charts is shown under it (kept in the saved notebook).

    Attributes:
        widget: the panel (an ipywidgets ``VBox``).
        handle: the :class:`LaunchHandle` of the latest run, or None.

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
            max_processes = machine_processes()
        if isinstance(max_processes, bool) or not isinstance(max_processes, int):
            raise TypeError(f"max_processes={max_processes!r} is not valid: expected an int >= 1")
        if max_processes < 1:
            raise ValueError(f"max_processes={max_processes!r} is not valid: expected an int >= 1")
        if num_processes is None:
            num_processes = max_processes
        if "ui" in options:
            raise TypeError("ui= is not valid here: the panel always shows widgets")
        self.handle: LaunchHandle | None = None
        self.display_id: str | None = None  # of the output under the panel that keeps a run
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
        if num_processes > max_processes:
            raise ValueError(
                f"num_processes={num_processes!r} is not valid: this panel offers at most "
                f"max_processes={max_processes}"
            )
        self._build(num_processes, max_processes, mixed_precision, start_method, timeout)
        self.stall_timeout.value = stall_timeout or 0.0
        self.output.value = output
        self._refresh_plan()

    def _build(self, n: int, most: int, precision: str, method: str, timeout: Any) -> None:
        import ipywidgets as widgets

        style = {"description_width": "130px"}
        name = getattr(self.function, "__qualname__", repr(self.function))
        self.title = widgets.HTML(f"<b>Launch</b> <code>{html.escape(name)}</code>")
        self.num_processes = widgets.BoundedIntText(
            value=n, min=1, max=most, description="processes", style=style
        )
        self.mixed_precision = widgets.Dropdown(
            options=list(MIXED_PRECISION_CHOICES), value=precision, description="mixed precision"
        )
        self.start_method = widgets.Dropdown(
            options=list(START_METHODS), value=method, description="start method", style=style
        )
        self.timeout = widgets.FloatText(
            value=timeout or 0.0, description="timeout (s, 0: none)", style=style
        )
        self.stall_timeout = widgets.FloatText(description="stall (s, 0: none)", style=style)
        self.output = widgets.Dropdown(
            options=list(OUTPUT_CHOICES), description="output", style=style
        )
        self.mixed_precision.style = style
        self.plan = widgets.HTML()
        self.launch_button = widgets.Button(description="Launch", button_style="success")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", disabled=True)
        self.message = widgets.HTML()
        self.runs = widgets.VBox()
        controls = [
            self.num_processes,
            self.mixed_precision,
            self.start_method,
            self.timeout,
            self.stall_timeout,
            self.output,
        ]
        for control in controls:
            control.observe(lambda change: self._refresh_plan(), names="value")
        self.launch_button.on_click(lambda button: self.launch())
        self.stop_button.on_click(lambda button: self.stop())
        buttons = widgets.HBox([self.launch_button, self.stop_button, self.message])
        settings = widgets.HBox([widgets.VBox(controls), self.plan])
        self.widget = widgets.VBox([self.title, settings, buttons, self.runs])

    def settings(self) -> LaunchSettings:
        """The current settings: the widgets' values over the options the panel was given."""
        return self.base.replace(
            num_processes=self.num_processes.value,
            mixed_precision=self.mixed_precision.value,
            start_method=self.start_method.value,
            timeout=self.timeout.value or None,
            stall_timeout=self.stall_timeout.value or None,
            output=self.output.value,
        )

    def _refresh_plan(self) -> None:
        try:
            plan = plan_launch(self.settings())
        except (TypeError, ValueError) as exc:
            self.plan.value = f'<span style="color:#d62728">{html.escape(str(exc))}</span>'
            return
        self.plan.value = plan_html(plan)

    # -- running ----------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.handle is not None and not self.handle.done

    def launch(self) -> LaunchHandle | None:
        """Start a run with the current settings (what the Launch button does).

        Returns:
            The run's handle, or None when the settings were refused (the panel says why).
        """
        if self.running:
            return self.handle
        try:
            settings = self.settings().replace(ui="widgets")
            handle = start_in_background(self.function, self.args, settings, show=False)
        except Exception as exc:  # shown in the panel: a button has nowhere else to raise to
            self.message.value = _error_html(exc)
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

    def _ended(self, handle: LaunchHandle) -> None:
        if handle.status == "finished":
            self.message.value = f"finished in {handle.result.duration:.1f} s"
        elif handle.status == "stopped":  # the user's own stop: not an error
            self.message.value = (
                '<span class="nl-run-stopped" style="color:#6b7280">'
                f"stopped after {handle.model.elapsed():.1f} s</span>"
            )
        else:
            self.message.value = _error_html(handle.exception)
        if self._keep(handle.view.final_panel()._repr_mimebundle_()):
            self.runs.children = ()
            handle.view.close()
        self.launch_button.disabled = False
        self.stop_button.disabled = True

    def _keep(self, bundle: dict[str, Any]) -> bool:
        """Show ``bundle`` in the output under the panel; False where the panel is not shown."""
        if self.display_id is None or not in_kernel():
            return False
        from IPython.display import update_display

        update_display(bundle, raw=True, display_id=self.display_id)
        return True

    def static_html(self) -> str:
        """The panel's settings as plain HTML: what a saved or exported notebook (no widget
        state) shows in its place."""
        settings = self.settings()
        name = getattr(self.function, "__qualname__", repr(self.function))
        rows = [
            ("processes", str(settings.num_processes)),
            ("mixed precision", settings.mixed_precision),
            ("start method", settings.start_method),
            ("timeout", "none" if settings.timeout is None else f"{settings.timeout:g} s"),
            (
                "stall timeout",
                "none" if settings.stall_timeout is None else f"{settings.stall_timeout:g} s",
            ),
            ("output", settings.output),
        ]
        cells = "".join(
            f'<tr><td style="padding:0 8px 0 0;opacity:0.7">{k}</td><td>{html.escape(v)}</td></tr>'
            for k, v in rows
        )
        return (
            f'<div class="nl-launch-panel"><b>Launch</b> <code>{html.escape(name)}</code>'
            f'<table class="nl-settings" style="font-size:12px">{cells}</table></div>'
        )

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # The widget where the frontend has its state; the settings as HTML and text elsewhere
        # (a saved notebook reopened, an HTML export).
        bundle = {**widget_bundle(self.widget), "text/html": self.static_html()}
        display({**bundle, "text/plain": repr(self)}, raw=True)
        # Below it, an output with no data (drawn as nothing) that a run's final panel fills.
        self.display_id = self.display_id or f"notebook_launcher-panel-{uuid.uuid4().hex}"
        display({}, raw=True, display_id=self.display_id)

    def __repr__(self) -> str:
        name = getattr(self.function, "__qualname__", "function")
        state = "running" if self.running else "idle"
        return f"LaunchPanel({name}, {state})"


def _error_html(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return f'<span class="nl-run-error" style="color:#d62728">{html.escape(text)}</span>'
