"""AcceleratedOptimizer: an optimizer that steps only when gradients are synchronised."""

from __future__ import annotations

from typing import Any

import torch

from ..ops.structures import send_to_device
from ..state.accelerator_state import AcceleratorState
from ..state.gradient import GradientState
from ..utils.validation import check_bool, invalid


def _scale(scaler: Any) -> float | None:
    if scaler is None or not scaler.is_enabled():
        return None
    return float(scaler.get_scale())


class FollowsGradientState:
    """Pickles without the process's GradientState and finds it again when unpickled."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "gradient_state"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.gradient_state = GradientState()


class AcceleratedOptimizer(FollowsGradientState, torch.optim.Optimizer):
    """Wraps an optimizer for training inside a prepared job.

    ``step()`` and ``zero_grad()`` act only on steps where gradients are synchronised (the last
    batch of each accumulation window); under fp16 the step goes through the gradient scaler,
    which skips it when gradients overflowed (``step_was_skipped`` then reads True).

    Args:
        optimizer: the ``torch.optim.Optimizer`` to wrap.
        device_placement: move the optimizer's state to the job's device.
        scaler: a ``torch.amp.GradScaler`` (fp16 training), or None.

    Raises:
        TypeError: ``optimizer`` is not a torch optimizer, or ``device_placement`` not a bool.

    Note:
        Whether a scaled step was skipped is read from the scaler (its scale drops exactly
        when it skips a step) instead of patching the optimizer's ``step``.
    """

    def __init__(self, optimizer: Any, device_placement: bool = True, scaler: Any = None) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise invalid("optimizer", optimizer, "expected a torch.optim.Optimizer", TypeError)
        if isinstance(optimizer, AcceleratedOptimizer):
            raise invalid(
                "optimizer", type(optimizer).__name__, "this optimizer is already prepared"
            )
        check_bool("device_placement", device_placement)
        if scaler is not None and not hasattr(scaler, "step"):
            raise invalid("scaler", scaler, "expected a torch.amp.GradScaler or None", TypeError)
        self.optimizer = optimizer
        self.scaler = scaler
        self.device_placement = device_placement
        self.gradient_state = GradientState()
        self._step_was_skipped = False
        if device_placement and optimizer.state:
            device = AcceleratorState().device if AcceleratorState().initialized else None
            if device is not None:
                state = optimizer.state_dict()
                optimizer.load_state_dict(send_to_device(state, device))

    # The wrapped optimizer holds the real state; these keep ``isinstance`` users working.
    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step()`` skipped the update (gradients overflowed under fp16)."""
        return self._step_was_skipped

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group to the wrapped optimizer."""
        self.optimizer.add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict into the wrapped optimizer (moved to the device first)."""
        if self.device_placement and AcceleratorState().initialized:
            state_dict = send_to_device(state_dict, AcceleratorState().device)
        self.optimizer.load_state_dict(state_dict)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict."""
        return self.optimizer.state_dict()

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Reset the gradients, on synchronising steps only (accumulation keeps them otherwise)."""
        if not self.gradient_state.sync_gradients:
            return
        if set_to_none is None:
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=check_bool("set_to_none", set_to_none))

    def train(self) -> None:
        """Forward to optimizers with a train mode (schedule-free ones); no-op otherwise."""
        if callable(getattr(self.optimizer, "train", None)):
            self.optimizer.train()

    def eval(self) -> None:
        """Forward to optimizers with an eval mode (schedule-free ones); no-op otherwise."""
        if callable(getattr(self.optimizer, "eval", None)):
            self.optimizer.eval()

    def step(self, closure: Any = None) -> Any:
        """Update the parameters, on synchronising steps only.

        Args:
            closure: re-evaluates the model and returns the loss, as ``torch.optim`` takes it.

        Returns:
            What the wrapped optimizer's ``step`` returned (None when no step was taken).
        """
        if not self.gradient_state.sync_gradients:
            self._step_was_skipped = False
            return None
        before = _scale(self.scaler)
        if before is None:
            self._step_was_skipped = False
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        result = (
            self.scaler.step(self.optimizer, closure)
            if closure
            else self.scaler.step(self.optimizer)
        )
        self.scaler.update()
        self._step_was_skipped = _scale(self.scaler) < before
        return result

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"
