"""AcceleratedScheduler: a learning-rate scheduler that follows the optimizer's real steps."""

from __future__ import annotations

from typing import Any

from ..state.gradient import GradientState
from ..state.partial import PartialState
from ..utils.validation import check_bool, invalid
from .optimizer import FollowsGradientState


class AcceleratedScheduler(FollowsGradientState):
    """Wraps a learning-rate scheduler so it steps when (and as often as) the optimizer does.

    With ``step_with_optimizer`` the scheduler steps only on synchronising steps, not after
    an optimizer step skipped by the fp16 scaler, and, without ``split_batches``, once per
    process (a schedule written for one process then ends at the same point of the data when
    each step consumes ``num_processes`` batches).

    Args:
        scheduler: the scheduler to wrap (anything with ``step()``).
        optimizers: the prepared optimizer(s) it follows.
        step_with_optimizer: follow the optimizer as above; False steps on every call.
        split_batches: batches are split across processes (one scheduler step per step).

    Raises:
        TypeError: an argument of the wrong type, named in the message.

    Note:
        As in Accelerate, ``GradientAccumulationPlugin(adjust_scheduler=True)`` counts the
        skipped accumulation steps into the scheduler's ``_step_count``.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Any,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
    ) -> None:
        if not callable(getattr(scheduler, "step", None)):
            raise invalid(
                "scheduler", scheduler, "expected a learning-rate scheduler with step()", TypeError
            )
        check_bool("step_with_optimizer", step_with_optimizer)
        check_bool("split_batches", split_batches)
        self.scheduler = scheduler
        self.optimizers = (
            list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
        )
        self.split_batches = split_batches
        self.step_with_optimizer = step_with_optimizer
        self.gradient_state = GradientState()

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the wrapped scheduler if the optimizer really stepped (see the class)."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler:
                self.scheduler._step_count += 1
            return
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        repeats = 1 if self.split_batches else PartialState().num_processes
        total = getattr(self.scheduler, "total_steps", None)
        for _ in range(repeats):
            # OneCycleLR raises past its total; stop there instead.
            if total is not None and self.scheduler._step_count > total:
                break
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        """The last learning rates computed by the scheduler."""
        return self.scheduler.get_last_lr()

    def get_lr(self) -> Any:
        """The scheduler's current learning rates."""
        return self.scheduler.get_lr()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped scheduler's state dict."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict into the wrapped scheduler."""
        self.scheduler.load_state_dict(state_dict)

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        """Forward to the wrapped scheduler's ``print_lr``."""
        return self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
