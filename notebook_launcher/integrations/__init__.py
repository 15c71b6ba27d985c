"""Live panels for training code that does not call :func:`notebook_launcher.log`.

Four adapters feed the launching notebook's status table and charts from other libraries, with
the same events as ``log``, ``progress`` and ``set_status``:

* :class:`~notebook_launcher.integrations.transformers.NotebookCallback`, a
  ``transformers.TrainerCallback``: every metric a ``Trainer`` logs (``on_log``), rank 0's
  progress in optimizer steps out of ``state.max_steps``, and each rank's phase (training,
  epoch, evaluating, done).
* :class:`~notebook_launcher.integrations.lightning.NotebookLogger`, a Lightning Fabric
  ``Logger``: what ``fabric.log``/``fabric.log_dict`` record, on every rank.
* :class:`~notebook_launcher.integrations.lightning_trainer.NotebookTrainerLogger`, a Lightning
  ``Trainer`` logger: what ``self.log``/``self.log_dict`` record, on every rank.
* :class:`~notebook_launcher.integrations.accelerate.NotebookTracker`, an
  ``accelerate.tracking.GeneralTracker``: what ``accelerator.log`` records once
  ``accelerator.init_trackers(...)`` ran (Accelerate logs on the main process only).
  notebook_launcher's own ``Accelerator`` adds its ``"notebook"`` tracker the same way in a
  launched worker (and takes ``log_with="notebook"`` explicitly too).

In a worker started by ``notebook_launcher`` all four are on by default: every
``transformers.Trainer`` created in the launched function gets the callback (it is added to
``transformers.trainer.DEFAULT_CALLBACKS`` of that worker), every ``Fabric`` and every Lightning
``Trainer`` gets its logger after its own, and every ``accelerate.Accelerator`` gets the tracker
after those of its ``log_with``. Passing one yourself as well does not log twice. Set the
environment variable ``NOTEBOOK_LAUNCHER_INTEGRATIONS`` before launching to choose: ``0`` (or
``none``, ``off``, ``false``) turns them all off, a comma-separated list such as
``transformers,lightning`` keeps those only, ``1``/``all`` (the default) keeps all. Outside a
launched worker the adapters do nothing, and nothing is changed in the kernel.

Independently of that switch, so that these libraries form one job of the launched processes: a
worker of a CPU job of several processes gets ``ACCELERATE_USE_CPU=1`` (unless the variable is
already set), which is what makes Accelerate's ``Accelerator()`` (and ``transformers.Trainer``)
join the job on a machine without accelerator instead of running one independent copy per
process; a worker forgets the Accelerate state the launching process had created (it describes
the kernel, a single process); ``destroy_process_group`` waits a moment for gloo's threads first
(see :mod:`notebook_launcher.integrations.teardown`); a worker forked from a Jupyter kernel
drops the kernel's interactive prompt (``sys.ps1``), so that Lightning accepts
``strategy="ddp"`` there as it does in a script; Lightning's strategies that fork the notebook's
process (``"ddp_notebook"``, ``"ddp_fork"``) run as ``"ddp"``, which joins the launched
processes instead of forking them again; a ``transformers.Trainer`` there prints its logs as
lines (as with ``disable_tqdm=True``) instead of its notebook display, which ipykernel drops
when a forked process sends it, and tqdm's notebook bars (``tqdm.auto``) become text bars, and
every tqdm bar's count shows in the status panel (see
:mod:`notebook_launcher.integrations.tqdm`); rich writes plain lines to the worker's streams
rather than notebook displays, and a ``rich.progress`` bar shows in the status panel (see
:mod:`notebook_launcher.integrations.rich`); and one process may not create both
notebook_launcher's ``Accelerator`` and Accelerate's (see
:mod:`notebook_launcher.state.mixing`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..state import mixing
from . import hooks, rich, teardown, tqdm

ENV_SWITCH = "NOTEBOOK_LAUNCHER_INTEGRATIONS"
NAMES = ("transformers", "lightning", "accelerate")
_OFF = ("0", "none", "off", "false", "no")
_ALL = ("", "1", "all", "on", "true", "yes")

# Where each integration starts: the module whose import (or presence) sets it up.
_FABRIC_MODULES = ("lightning.fabric.fabric", "lightning_fabric.fabric")
_TRAINER_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
# Lightning's strategies that start the processes themselves by forking the notebook's process.
# In a launched worker the processes exist already: they run as "ddp", which joins them.
_FORKING_STRATEGIES = ("ddp_notebook", "ddp_fork")
# Modules of Lightning that read at import whether the session is interactive (and then refuse
# Fabric(strategy="ddp") or Trainer(strategy="ddp")), each under both of its package names.
_LIGHTNING_INTERACTIVE = (
    "lightning.fabric.utilities.imports",
    "lightning.fabric.connector",
    "lightning.pytorch.trainer.connectors.accelerator_connector",
    "lightning_fabric.utilities.imports",
    "lightning_fabric.connector",
    "pytorch_lightning.trainer.connectors.accelerator_connector",
)


def enabled_integrations(value: str | None = None) -> tuple[str, ...]:
    """The integrations ``value`` (default: the environment variable) turns on, in order.

    Raises:
        ValueError: a name that is not one of "transformers", "lightning", "accelerate".
    """
    if value is None:
        value = os.environ.get(ENV_SWITCH, "")
    if not isinstance(value, str):
        raise TypeError(f"value={value!r} is not valid: expected a str or None")
    text = value.strip().lower()
    if text in _OFF:
        return ()
    if text in _ALL:
        return NAMES
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        raise ValueError(
            f"environment variable {ENV_SWITCH}={value!r} is not valid: expected 0 (none), "
            f"1 (all) or a comma-separated list of {', '.join(NAMES)}; unknown: "
            + ", ".join(repr(name) for name in unknown)
        )
    return tuple(name for name in NAMES if name in names)


def cpu_job_environment(device: str, world_size: int) -> dict[str, str]:
    """The variables a worker of a CPU job of ``world_size`` processes sets for Accelerate.

    Accelerate's state takes its multi-process CPU path only with ``cpu=True`` or
    ``ACCELERATE_USE_CPU``; without it every process of a CPU job runs alone.

    Raises:
        TypeError: ``device`` is not a str or ``world_size`` not an int >= 1.
    """
    if not isinstance(device, str):
        raise TypeError(f"device={device!r} is not valid: expected a str such as 'cpu'")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise TypeError(f"world_size={world_size!r} is not valid: expected an int >= 1")
    if device == "cpu" and world_size > 1 and "ACCELERATE_USE_CPU" not in os.environ:
        return {"ACCELERATE_USE_CPU": "1"}
    return {}


def prepare_worker(context: Any) -> tuple[str, ...]:
    """Set up a launched worker before the function runs; returns the integrations turned on.

    Called by the worker bootstrap with the worker's ``WorkerContext``.

    Raises:
        ValueError: ``NOTEBOOK_LAUNCHER_INTEGRATIONS`` holds an unknown name.
    """
    names = enabled_integrations()
    os.environ.update(cpu_job_environment(context.device, context.world_size))
    _run_as_a_script()
    _forget_the_kernels_accelerate_state()
    hooks.when_imported("torch.distributed.distributed_c10d", teardown.install)
    hooks.when_imported("tqdm.std", tqdm.show_in_panel)
    hooks.when_imported("rich.console", rich.plain_consoles)
    hooks.when_imported("rich.progress", rich.progress_in_panel)
    hooks.when_imported("tqdm.notebook", tqdm.text_bars)
    hooks.when_imported("accelerate.state", _refuse_accelerate_beside_ours)
    if "transformers" in names:
        hooks.when_imported("transformers.trainer", _add_trainer_callback)
    lightning = "lightning" in names
    for module in _FABRIC_MODULES:
        hooks.when_imported(module, _set_up_fabric if lightning else _fabric_strategy_only)
    for module in _TRAINER_MODULES:
        hooks.when_imported(module, _set_up_trainer if lightning else _trainer_strategy_only)
    if "accelerate" in names:
        hooks.when_imported("accelerate.accelerator", _add_accelerate_tracker)
    return names


def _run_as_a_script() -> None:
    """A worker runs the function as torchrun runs a script, but one forked from a kernel still
    carries the kernel's prompt (``sys.ps1``), by which Lightning refuses the "ddp" strategy "in
    an interactive environment" although the launcher made the processes. Drop it, and correct
    what Lightning already read in the kernel."""
    for name in ("ps1", "ps2"):
        if hasattr(sys, name):
            delattr(sys, name)
    if not sys.flags.interactive:
        for module in _LIGHTNING_INTERACTIVE:
            hooks.when_imported(module, _not_interactive)
    hooks.when_imported("transformers.trainer", _printed_progress)


def _forget_the_kernels_accelerate_state() -> None:
    """A worker forked from a process that had created Accelerate's state (a ``PartialState``,
    an ``Accelerator``, a ``Trainer`` tried out in the kernel) inherits it: a single process on
    the kernel's device, so Accelerate in the worker would not join the job. Forget it, as the
    bootstrap forgets ours."""
    state = sys.modules.get("accelerate.state")
    if state is None:
        return
    for name in ("AcceleratorState", "PartialState", "GradientState"):
        shared = getattr(getattr(state, name, None), "_shared_state", None)
        if shared is not None and hasattr(shared, "clear"):
            shared.clear()


def _not_interactive(module: Any) -> None:
    if getattr(module, "_IS_INTERACTIVE", None) is True:
        module._IS_INTERACTIVE = False


def _printed_progress(module: Any) -> None:
    """A Trainer in a worker forked from a kernel picks its notebook display (and tqdm's
    notebook widgets), which only the kernel process may send: ipykernel drops what a forked
    process sends, so nothing would show. Print the logs as lines instead (as with
    ``disable_tqdm=True``); the status panel shows the progress."""
    progress = getattr(module, "DEFAULT_PROGRESS_CALLBACK", None)
    if getattr(progress, "__name__", None) == "NotebookProgressCallback":
        module.DEFAULT_PROGRESS_CALLBACK = module.PrinterCallback


def _refuse_accelerate_beside_ours(module: Any) -> None:
    def __init__(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
        mixing.check_accelerate_may_start()
        wrapped(*args, **kwargs)

    hooks.wrap_method(module.AcceleratorState, "__init__", __init__)


def _add_trainer_callback(module: Any) -> None:
    from .transformers import NotebookCallback

    if NotebookCallback not in module.DEFAULT_CALLBACKS:
        module.DEFAULT_CALLBACKS.append(NotebookCallback)


def _append_after_init(owner: type, attribute: str, adapter: Any) -> None:
    """Wrap ``owner.__init__``: once it ran, append an ``adapter()`` instance to
    ``self.<attribute>`` unless one is there (the adapter class is imported at that moment,
    when the library has finished importing)."""

    def __init__(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
        wrapped(*args, **kwargs)
        kind = adapter()
        items = getattr(instance, attribute)
        if not any(isinstance(item, kind) for item in items):
            items.append(kind())

    hooks.wrap_method(owner, "__init__", __init__)


def _notebook_logger() -> type:
    from .lightning import NotebookLogger

    return NotebookLogger


def _notebook_tracker() -> type:
    from .accelerate import NotebookTracker

    return NotebookTracker


def _launched_strategy(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with a forking strategy ("ddp_notebook", "ddp_fork_find_unused_parameters_true"
    ...) named as its "ddp" equivalent: Lightning would try to fork the launched worker again
    (and Fabric then asks for a function to launch), while "ddp" joins the launcher's processes
    as it joins torchrun's."""
    strategy = kwargs.get("strategy")
    if not isinstance(strategy, str):
        return kwargs
    for name in _FORKING_STRATEGIES:
        if strategy == name or strategy.startswith(name + "_"):
            return {**kwargs, "strategy": "ddp" + strategy[len(name) :]}
    return kwargs


def _wrap_lightning_init(owner: type, after: Any = None) -> None:
    """Wrap ``owner.__init__`` (a ``Fabric`` or a ``Trainer``): a forking strategy runs as
    "ddp", and ``after(self)`` runs once the object is made."""

    def __init__(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
        wrapped(*args, **_launched_strategy(kwargs))
        if after is not None:
            after(instance)

    hooks.wrap_method(owner, "__init__", __init__)


def _fabric_strategy_only(module: Any) -> None:
    _wrap_lightning_init(module.Fabric)


def _trainer_strategy_only(module: Any) -> None:
    _wrap_lightning_init(module.Trainer)


def _set_up_fabric(module: Any) -> None:
    def add_logger(fabric: Any) -> None:
        kind = _notebook_logger()
        if not any(isinstance(logger, kind) for logger in fabric.loggers):
            fabric.loggers.append(kind())

    _wrap_lightning_init(module.Fabric, add_logger)


def _set_up_trainer(module: Any) -> None:
    def add_logger(trainer: Any) -> None:
        from .lightning_trainer import logger_class

        kind = logger_class(module)
        if not any(isinstance(logger, kind) for logger in trainer.loggers):
            # A new list: Lightning may hand out the one it holds, and the setter keeps ours.
            trainer.loggers = [*trainer.loggers, kind(trainer.default_root_dir)]

    _wrap_lightning_init(module.Trainer, add_logger)


def _add_accelerate_tracker(module: Any) -> None:
    _append_after_init(module.Accelerator, "log_with", _notebook_tracker)


__all__ = ["ENV_SWITCH", "NAMES", "cpu_job_environment", "enabled_integrations", "prepare_worker"]
