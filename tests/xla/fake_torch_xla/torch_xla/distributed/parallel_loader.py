"""TEST DOUBLE of torch_xla.distributed.parallel_loader: MpDeviceLoader moves batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def _to(value: Any, device: Any) -> Any:
    if hasattr(value, "to"):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


class MpDeviceLoader:
    """Iterates ``loader``, each batch moved to ``device``."""

    def __init__(self, loader: Any, device: Any, **kwargs: Any) -> None:
        self._loader = loader
        self._device = device

    def __iter__(self) -> Iterator[Any]:
        for batch in self._loader:
            yield _to(batch, self._device)

    def __len__(self) -> int:
        return len(self._loader)
