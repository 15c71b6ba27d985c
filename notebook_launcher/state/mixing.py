"""One Accelerator per process: notebook_launcher's or Accelerate's, never both.

Both keep a process-wide state (device, process group, mixed precision, gradient accumulation)
and wrap the model in their own DistributedDataParallel, so a process that creates both trains
with two conflicting settings. Whichever comes second is refused with a message saying which one
exists. Nothing here imports Accelerate: its state is looked up in ``sys.modules``.
"""

from __future__ import annotations

import sys

ADVICE = (
    "Use one of them in the launched function: notebook_launcher.Accelerator and "
    "accelerate.Accelerator take the same arguments and methods, so changing the import is "
    "enough. notebook_launcher's panels show either one's metrics (see "
    "notebook_launcher.integrations)."
)


def accelerate_state_exists() -> bool:
    """Whether Accelerate's ``AcceleratorState`` was created in this process."""
    state = sys.modules.get("accelerate.state")
    try:
        shared = state.AcceleratorState._shared_state
        # It starts as a copy of PartialState's and adds the Accelerator's settings.
        return bool(shared) and shared != state.PartialState._shared_state
    except AttributeError:  # not imported, or a release without these
        return False


def our_state_exists() -> bool:
    """Whether notebook_launcher's ``AcceleratorState`` was created in this process."""
    module = sys.modules.get("notebook_launcher.state.accelerator_state")
    return module is not None and bool(module.AcceleratorState._shared_state)


def check_ours_may_start() -> None:
    """Raise RuntimeError when Accelerate's state already exists (before ours is created)."""
    if accelerate_state_exists():
        raise RuntimeError(
            "accelerate.Accelerator already runs in this process (transformers.Trainer creates "
            "one too), so notebook_launcher.Accelerator cannot be created beside it: the two "
            "would each wrap the model and keep their own settings. " + ADVICE
        )


def check_accelerate_may_start() -> None:
    """Raise RuntimeError when our state already exists (before Accelerate's is created)."""
    if our_state_exists():
        raise RuntimeError(
            "notebook_launcher.Accelerator already runs in this process, so accelerate's "
            "Accelerator (or a transformers.Trainer, which creates one) cannot be created beside "
            "it: the two would each wrap the model and keep their own settings. " + ADVICE
        )
