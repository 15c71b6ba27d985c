"""A ``transformers.TrainerCallback`` that feeds the launching notebook's panels.

Example:
    >>> from notebook_launcher.integrations.transformers import NotebookCallback
    >>> trainer = Trainer(model, args, train_dataset=data, callbacks=[NotebookCallback()])

In a worker started by ``notebook_launcher`` every ``Trainer`` gets one already (see
:mod:`notebook_launcher.integrations`); outside a launched worker it does nothing.
"""

from __future__ import annotations

import math
from typing import Any

from transformers.trainer_callback import TrainerCallback

from .. import live as tracking
from .values import numbers_of

# Logged once at the end of training or evaluation: speeds and counters, not curves. The
# status row already shows it/s; "epoch" is shown in the status text.
SKIPPED = frozenset({"epoch", "total_flos"})
SKIPPED_SUFFIXES = ("_runtime", "_samples_per_second", "_steps_per_second")
_OWNER = "_notebook_launcher_callback"  # attribute of TrainerState: which callback reports


def _skipped(name: str) -> bool:
    return name in SKIPPED or name.endswith(SKIPPED_SUFFIXES)


def numeric_metrics(logs: Any) -> dict[str, Any]:
    """The values of ``logs`` worth a chart: numbers, not bools, not the skipped names."""
    return numbers_of(logs, _skipped)


class NotebookCallback(TrainerCallback):
    """Shows a ``Trainer``'s metrics, progress and phase in the launching notebook's panels.

    * every number the Trainer logs (``loss``, ``grad_norm``, ``learning_rate``, ``eval_*``,
      your own ``trainer.log(...)``) is charted per rank at the step it was logged at, except
      ``epoch``, ``total_flos`` and the ``*_runtime``/``*_per_second`` speeds;
    * rank 0's progress bar counts optimizer steps out of ``state.max_steps``;
    * each rank's status reads "training, epoch 1 of 3", "evaluating" or "done".

    Several instances on one Trainer (the one added by default and one passed in
    ``callbacks=``) report once: the first one the Trainer calls does.
    """

    def __init__(self) -> None:
        self._bar: tracking.Progress | None = None
        self._training = False

    def _reports(self, state: Any) -> bool:
        owner = getattr(state, _OWNER, None)
        if owner is None:
            setattr(state, _OWNER, id(self))
            return True
        return owner == id(self)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._reports(state):
            return
        self._training = True
        tracking.set_status("training")
        total = (
            state.max_steps if isinstance(state.max_steps, int) and state.max_steps > 0 else None
        )
        self._bar = tracking.progress(total=total, desc="train")
        self._bar.update(state.global_step)  # resumed from a checkpoint

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._reports(state):
            return
        epoch = int(state.epoch or 0) + 1
        epochs = math.ceil(state.num_train_epochs) if state.num_train_epochs else None
        tracking.set_status(f"training, epoch {epoch}" + (f" of {epochs}" if epochs else ""))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._reports(state) and self._bar is not None:
            self._bar.n = state.global_step

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._reports(state):
            tracking.set_status("evaluating")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._reports(state):
            tracking.set_status("training" if self._training else "evaluated")

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not self._reports(state):
            return
        values = numeric_metrics(logs)
        if values:
            tracking.log(values, step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._reports(state):
            return
        self._training = False
        if self._bar is not None:
            self._bar.n = state.global_step
            self._bar.close()
        tracking.set_status("done")


__all__ = ["NotebookCallback", "numeric_metrics"]
