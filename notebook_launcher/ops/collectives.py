"""Collectives on nested structures of tensors: gather, broadcast, reduce, pad, objects, barrier.

Every operation works unlaunched (one process: no communication at all), across the ranks of a
``notebook_launcher`` job, and under torchrun. Costs over raw ``torch.distributed``: a tensor is
sent as it is (no copy unless it is not contiguous, no ``torch.cat`` after a gather), and the
small tensors of a nested structure travel together, one collective per dtype instead of one per
tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from ..state.partial import PartialState
from ..utils.validation import check_bool, check_choice, check_int, invalid
from .communicator import Communicator, current
from .debug import brief, describe, describe_ndims, verify
from .packing import pack, plan, put_back, tensor_leaves, unpack

REDUCTIONS = ("mean", "sum", "max", "none")


def _alone(comm: Communicator) -> bool:
    """Whether this process is not part of a job (a job of one launched process is one)."""
    return comm.outside_a_job


# -- gather ----------------------------------------------------------------------------------------


def _gather_alone(comm: Communicator, t: torch.Tensor) -> torch.Tensor:
    rows = t.contiguous().reshape(1) if t.ndim == 0 else t.contiguous()
    out = rows.new_empty((comm.world_size * rows.shape[0], *rows.shape[1:]))
    comm.all_gather_into(out, rows)
    return out


def _gather_packed(comm: Communicator, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    flat = pack(tensors)
    out = flat.new_empty(comm.world_size * flat.numel())
    comm.all_gather_into(out, flat)
    table = out.view(comm.world_size, -1)
    world = comm.world_size
    parts = torch.split(table, [t.numel() for t in tensors], dim=1)
    # Each part holds one tensor's rows from every rank: (world, numel) -> rank after rank.
    return [
        part.reshape((world * t.shape[0], *t.shape[1:]) if t.ndim else (world,))
        for part, t in zip(parts, tensors, strict=True)
    ]


def gather(tensor: Any) -> Any:
    """Gather tensors from every process, concatenated along the first dimension.

    Args:
        tensor: a tensor or nested lists, tuples and dicts of tensors; every process must pass
            the same structure, shapes and dtypes (pad ragged tensors first with
            :func:`pad_across_processes`).

    Returns:
        The same structure; each tensor holds every process's rows in rank order (a 0-d tensor
        becomes one row per process). In a single process ``tensor`` itself.

    Raises:
        TypeError: a leaf that is not a tensor (in a job; a process that is not part of one
            returns ``tensor`` as it is, whatever it holds, as Accelerate does).
        DistributedOperationException: in debug mode, the processes' inputs differ.

    Example:
        >>> predictions = gather(logits.argmax(-1))  # on every process: all processes' rows
    """
    comm = current()
    if _alone(comm):
        return tensor
    tensors = tensor_leaves(tensor, "gather")
    if comm.world_size == 1 or not tensors:
        return tensor
    if comm.debug:
        verify(
            comm,
            f"gather(tensor={describe(tensor)})",
            hint="To gather tensors whose sizes differ, pad them first: "
            "gather(pad_across_processes(tensor)).",
        )
    results: list[Any] = [None] * len(tensors)
    alone, packs = plan(tensors)
    for i in alone:
        results[i] = _gather_alone(comm, tensors[i])
    for group in packs:
        for i, r in zip(group, _gather_packed(comm, [tensors[i] for i in group]), strict=True):
            results[i] = r
    return put_back(tensor, results)


def gather_object(object: Any) -> list[Any]:
    """Gather a picklable object from every process.

    Args:
        object: a list or tuple (concatenated across processes, as Accelerate does) or any other
            picklable object (collected, one item per process).

    Returns:
        A list, the same on every process, in rank order.

    Example:
        >>> gather_object([f"rank {state.process_index}"])
        ['rank 0', 'rank 1']

    Note:
        Accelerate iterates over each process's object, so a dict gives its keys and a number
        fails; here any object other than a list or tuple gives one item per process. The result
        is always a list, in a single process too.
    """
    comm = current()
    seen = [object] if comm.world_size == 1 else comm.all_gather_object(object)
    if isinstance(object, (list, tuple)):
        return [item for part in seen for item in part]
    return seen


# -- broadcast -------------------------------------------------------------------------------------


def _check_source(comm: Communicator, from_process: Any) -> int:
    check_int("from_process", from_process, 0)
    if comm.world_size > 1 and from_process >= comm.world_size:
        raise invalid(
            "from_process", from_process, f"processes are numbered 0 to {comm.world_size - 1}"
        )
    return from_process


def _broadcast_alone(comm: Communicator, t: torch.Tensor, src: int) -> None:
    if t.is_contiguous():
        comm.broadcast(t, src)
        return
    buffer = t.contiguous()
    comm.broadcast(buffer, src)
    if comm.rank != src:
        with torch.no_grad():
            t.copy_(buffer)


def _broadcast_packed(comm: Communicator, tensors: list[torch.Tensor], src: int) -> None:
    flat = pack(tensors)
    comm.broadcast(flat, src)
    if comm.rank != src:
        with torch.no_grad():
            for t, part in zip(tensors, unpack(flat, tensors), strict=True):
                t.copy_(part)


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Copy process ``from_process``'s tensors into every other process's tensors, in place.

    Args:
        tensor: a tensor or nested lists, tuples and dicts of tensors, of the same structure,
            shapes and dtypes on every process.
        from_process: the index of the process whose values are sent.

    Returns:
        ``tensor``, whose tensors now hold ``from_process``'s values.

    Raises:
        TypeError, ValueError: a leaf that is not a tensor, or a bad ``from_process``.
        DistributedOperationException: in debug mode, the processes' inputs differ.

    Example:
        >>> weights = broadcast(torch.randn(10), from_process=0)  # the same on every process

    Note:
        Non-contiguous tensors are updated in place too (torch.distributed refuses them), and
        the result is ``tensor`` itself rather than a rebuilt container of the same tensors. A
        leaf that is not a tensor is a TypeError in a job; a process that is not part of one
        returns ``tensor`` as it is, as Accelerate does.
    """
    comm = current()
    src = _check_source(comm, from_process)
    if _alone(comm):
        return tensor
    tensors = tensor_leaves(tensor, "broadcast")
    if comm.world_size == 1 or not tensors:
        return tensor
    if comm.debug:
        verify(comm, f"broadcast(tensor={describe(tensor)}, from_process={src})")
    alone, packs = plan(tensors)
    for i in alone:
        _broadcast_alone(comm, tensors[i], src)
    for group in packs:
        _broadcast_packed(comm, [tensors[i] for i in group], src)
    return tensor


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Replace the items of ``object_list`` with process ``from_process``'s, in place.

    Args:
        object_list: a list of picklable objects, of the same length on every process.
        from_process: the index of the process whose objects are sent.

    Returns:
        ``object_list`` itself.

    Example:
        >>> config = broadcast_object_list([load_config() if state.is_main_process else None])[0]
    """
    comm = current()
    src = _check_source(comm, from_process)
    if not isinstance(object_list, list):
        raise invalid(
            "object_list", brief(object_list), "expected a list (filled in place)", TypeError
        )
    if comm.world_size == 1:
        return object_list
    if comm.debug:
        verify(comm, f"broadcast_object_list(<list of {len(object_list)}>, from_process={src})")
    comm.broadcast_object_list(object_list, src)
    return object_list


# -- reduce ----------------------------------------------------------------------------------------


# Averaging divides while copying when that is exact: by a power of two, which only changes the
# exponent (float16's narrow range would lose the last bits of its subnormals, so not there).
_PREDIVIDED = (torch.float32, torch.float64, torch.bfloat16, torch.complex64, torch.complex128)


def _working_copy(
    t: torch.Tensor, summing: bool, divisor: int | None
) -> tuple[torch.Tensor, int | None]:
    """A contiguous copy to reduce into, and the divisor still to apply to the sum.

    Booleans are counted, as int64. A floating-point tensor averaged over a power-of-two number
    of processes is divided as it is copied: one pass over the memory fewer, the same bits
    (barring subnormals), and a sum that cannot overflow where the mean would not.
    """
    if t.requires_grad:
        t = t.detach()
    if summing and t.dtype is torch.bool:
        return t.to(torch.int64, memory_format=torch.contiguous_format), divisor
    if divisor is not None and divisor & (divisor - 1) == 0 and t.dtype in _PREDIVIDED:
        work = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        return torch.div(t, divisor, out=work), None
    return t.clone(memory_format=torch.contiguous_format), divisor


def _reduce_one(
    comm: Any, t: torch.Tensor, summing: bool, divisor: int | None, scale: float
) -> torch.Tensor:
    """One tensor summed (or averaged) over the processes when ``comm`` is given, into a copy."""
    work, divisor = _working_copy(t, summing, divisor)
    if comm is not None:
        comm.all_reduce_sum(work)
    return _finish(work, divisor, scale)


def _finish(x: torch.Tensor, divisor: int | None, scale: float) -> torch.Tensor:
    exact = x.dtype.is_floating_point or x.dtype.is_complex
    if divisor is not None:
        x = x.div_(divisor) if exact else x / divisor
        exact = True
    if scale != 1:
        x = x.mul_(scale) if exact else x * scale
    return x


def _reduce_max(comm: Any, t: torch.Tensor, scale: float) -> torch.Tensor:
    """The element-wise largest value of ``t`` over the processes, into a new tensor."""
    if t.dtype.is_complex:
        raise invalid("reduction", "max", "complex tensors have no order", TypeError)
    if t.requires_grad:
        t = t.detach()
    if comm is None:
        return _finish(t.clone(memory_format=torch.contiguous_format), None, scale)
    rows = t.contiguous().reshape(1, -1)
    every = rows.new_empty((comm.world_size, rows.shape[1]))
    comm.all_gather_into(every, rows)
    return _finish(torch.amax(every, 0).reshape(t.shape), None, scale)


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Sum, average or take the maximum of tensors over all processes.

    Args:
        tensor: a tensor or nested lists, tuples and dicts of tensors, of the same structure,
            shapes and dtypes on every process.
        reduction: "mean" (sum divided by the number of processes), "sum", "max" (the
            element-wise largest value), or "none" (no communication: each process keeps its
            own values).
        scale: a factor applied to the result.

    Returns:
        The same structure of new tensors (the inputs are not modified), the same on every
        process for "mean", "sum" and "max".

    Raises:
        TypeError, ValueError: a leaf that is not a tensor, a bad ``reduction`` or ``scale``.
        DistributedOperationException: in debug mode, the processes' inputs differ.

    Example:
        >>> mean_loss = reduce(loss.detach())
        >>> correct = reduce(hits, reduction="sum")

    Note:
        Differences from Accelerate: "none" does nothing across processes (Accelerate sums);
        "mean" of an integer or bool tensor gives a floating-point tensor (Accelerate fails);
        bool tensors are summed as int64 counts; ``scale`` applies on every device (Accelerate
        uses it on XLA only); results are detached from autograd.
    """
    reduction = check_choice("reduction", reduction, REDUCTIONS)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise invalid("scale", scale, "expected a number", TypeError)
    comm = current()
    summing = reduction != "none"
    divisor = comm.world_size if reduction == "mean" else None
    communicate = summing and comm.world_size > 1
    tensors = tensor_leaves(tensor, "reduce")
    if reduction == "max":
        if communicate and comm.debug:
            verify(comm, f"reduce(tensor={describe(tensor)}, reduction='max')")
        group = comm if communicate else None
        return put_back(tensor, [_reduce_max(group, t, scale) for t in tensors])
    if not communicate:
        return put_back(tensor, [_reduce_one(None, t, summing, divisor, scale) for t in tensors])
    if comm.debug:
        verify(comm, f"reduce(tensor={describe(tensor)}, reduction={reduction!r})")
    if len(tensors) == 1:  # the common case: nothing to plan
        return put_back(tensor, [_reduce_one(comm, tensors[0], summing, divisor, scale)])
    results = [None] * len(tensors)
    alone, packs = plan(tensors)
    for i in alone:
        results[i] = _reduce_one(comm, tensors[i], summing, divisor, scale)
    for group in packs:
        members = [tensors[i] for i in group]
        flat = pack(members)
        flat = flat.to(torch.int64) if flat.dtype is torch.bool else flat
        comm.all_reduce_sum(flat)
        flat = _finish(flat, divisor, scale)
        for i, r in zip(group, unpack(flat, members), strict=True):
            results[i] = r
    return put_back(tensor, results)


# -- padding ---------------------------------------------------------------------------------------


def _size_along(t: torch.Tensor, dim: int) -> int:
    """The size of ``t`` along ``dim``, -1 where ``dim`` does not exist (left unpadded)."""
    if getattr(t, "is_nested", False) or not -t.ndim <= dim < t.ndim:
        return -1
    return t.shape[dim]


def _padded(t: torch.Tensor, dim: int, size: int, pad_index: Any, pad_first: bool) -> torch.Tensor:
    dim = dim % t.ndim
    shape = list(t.shape)
    old, shape[dim] = shape[dim], size
    out = t.new_full(shape, pad_index)
    start = size - old if pad_first else 0
    out.narrow(dim, start, old).copy_(t)
    return out


def pad_across_processes(
    tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False
) -> Any:
    """Pad tensors along ``dim`` to the largest size any process has, so they can be gathered.

    Args:
        tensor: a tensor or nested lists, tuples and dicts of tensors, of the same structure and
            numbers of dimensions on every process.
        dim: the dimension to pad (negative counts from the end). Tensors without that
            dimension (0-d ones, for example) are returned as they are.
        pad_index: the value of the padding.
        pad_first: pad at the start instead of the end.

    Returns:
        The same structure; tensors already of the largest size are returned as they are, the
        others as new padded tensors. In a single process ``tensor`` itself.

    Example:
        >>> padded = pad_across_processes(predictions, dim=1, pad_index=-100)
        >>> all_predictions = gather(padded)

    Note:
        The sizes of all the tensors of a structure are exchanged in one collective
        (Accelerate makes one per tensor), and the padded tensor keeps its dtype whatever
        ``pad_index`` is (Accelerate turns an integer tensor padded with a float into floats).
    """
    check_int("dim", dim)
    if isinstance(pad_index, bool) or not isinstance(pad_index, (int, float)):
        raise invalid("pad_index", pad_index, "expected a number", TypeError)
    check_bool("pad_first", pad_first)
    comm = current()
    tensors = tensor_leaves(tensor, "pad_across_processes")
    if comm.world_size == 1 or not tensors:
        return tensor
    if comm.debug:
        call = f"pad_across_processes(tensor={describe(tensor)}, dim={dim})"
        verify(comm, call, key=(describe_ndims(tensor), dim))
    mine = torch.tensor([_size_along(t, dim) for t in tensors], device=comm.control_device)
    every = mine.new_empty(comm.world_size * len(tensors))
    comm.all_gather_into(every, mine)
    largest = every.view(comm.world_size, -1).amax(0).tolist()
    results = [
        t if size == -1 or size == t.shape[dim] else _padded(t, dim, size, pad_index, pad_first)
        for t, size in zip(tensors, largest, strict=True)
    ]
    return put_back(tensor, results)


def wait_for_everyone() -> None:
    """Block until every process reaches this call (nothing to wait for in a single process).

    Example:
        >>> if state.is_main_process:
        ...     prepare_files()
        >>> wait_for_everyone()  # the others wait for the files
    """
    PartialState().wait_for_everyone()
