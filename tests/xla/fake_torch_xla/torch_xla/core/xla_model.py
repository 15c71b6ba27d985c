"""TEST DOUBLE of torch_xla.core.xla_model: collectives over gloo between replicas."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import torch

from .. import _fake
from .. import device as _device

REDUCE_SUM = "sum"
REDUCE_MAX = "max"
REDUCE_MIN = "min"


def xla_device(n: int | None = None) -> torch.device:
    return _device()


def mark_step() -> None:
    pass


def _op(reduce_type: str) -> Any:
    import torch.distributed as dist

    ops = {
        REDUCE_SUM: dist.ReduceOp.SUM,
        REDUCE_MAX: dist.ReduceOp.MAX,
        REDUCE_MIN: dist.ReduceOp.MIN,
    }
    try:
        return ops[reduce_type]
    except KeyError:
        raise ValueError(f"Invalid reduce type: {reduce_type}") from None


def all_reduce(
    reduce_type: str, inputs: Any, scale: float = 1.0, groups: Any = None, pin_layout: bool = True
) -> Any:
    """A tensor: returns the reduced copy. A list of tensors: reduced in place (returns None)."""
    op = _op(reduce_type)
    in_place = isinstance(inputs, list)
    tensors = inputs if in_place else [inputs.clone()]
    for t in tensors:
        if _fake.replica().world_size > 1:
            _fake.group().allreduce([t], _allreduce_options(op)).wait()
        if scale != 1.0:
            t.mul_(scale)
    return None if in_place else tensors[0]


def _allreduce_options(op: Any) -> Any:
    import torch.distributed as dist

    options = dist.AllreduceOptions()
    options.reduceOp = op
    return options


def all_gather(
    value: torch.Tensor,
    dim: int = 0,
    groups: Any = None,
    output: Any = None,
    pin_layout: bool = True,
) -> torch.Tensor:
    """Every replica's ``value``, concatenated along ``dim`` in ordinal order."""
    me = _fake.replica()
    if me.world_size == 1:
        return value.clone()
    value = value.contiguous()
    parts = [torch.empty_like(value) for _ in range(me.world_size)]
    _fake.group().allgather([parts], [value]).wait()
    return torch.cat(parts, dim=dim)


def rendezvous(tag: str, payload: bytes = b"", replicas: list[int] = []) -> list[bytes]:  # noqa: B006
    """Wait for every replica; return every replica's ``payload`` in ordinal order."""
    if replicas and len(replicas) != _fake.replica().world_size:
        raise ValueError("Only global rendezvous is supported")
    if not isinstance(payload, bytes):
        raise TypeError(f"`payload` must be bytes, not {type(payload)}")
    me = _fake.replica()
    if me.world_size == 1:
        return [payload]
    data = torch.tensor(list(payload), dtype=torch.uint8)
    sizes = all_gather(torch.tensor([data.numel()], dtype=torch.int64))
    largest = int(sizes.max())
    if largest == 0:
        return [b"" for _ in range(me.world_size)]
    padded = torch.nn.functional.pad(data, (0, largest - data.numel()))
    table = all_gather(padded).view(me.world_size, largest)
    return [bytes(table[i, : int(sizes[i])].tolist()) for i in range(me.world_size)]


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list[Any]], Any]) -> Any:
    """``reduce_fn`` of every replica's ``data`` (ordinal order), the same on every replica."""
    return reduce_fn([pickle.loads(p) for p in rendezvous(tag, pickle.dumps(data))])


def send_cpu_data_to_device(datas: Any, device: Any, input_sharding: Any = None) -> Any:
    """Copies of the CPU tensors (exactly ``torch.Tensor``) in ``datas`` on ``device``.

    Rebuilt as torch_xla rebuilds them: tuples (named ones too) become lists, dicts plain
    dicts, other objects with a ``__dict__`` shallow copies; a lone tensor comes back in a list.
    """
    if type(datas) is torch.Tensor:
        datas = [datas]
    return _rewrite(datas, torch.device(device), {})


def _rewrite(value: Any, device: torch.device, seen: dict[int, Any]) -> Any:
    if id(value) in seen:
        return seen[id(value)]
    if type(value) is torch.Tensor and value.device.type == "cpu":
        result = value.to(device, copy=True)
    elif isinstance(value, dict):
        result = {_rewrite(k, device, seen): _rewrite(v, device, seen) for k, v in value.items()}
    elif isinstance(value, set):
        result = {_rewrite(v, device, seen) for v in value}
    elif isinstance(value, (list, tuple)):
        result = [_rewrite(v, device, seen) for v in value]
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        import copy

        result = copy.copy(value)
        for key, item in vars(value).items():
            result.__dict__[key] = _rewrite(item, device, seen)
    else:
        result = value
    seen[id(value)] = result
    return result
