"""PartialState: who this process is in the job, shared by every instance in the process."""

from __future__ import annotations

from typing import Any

import torch

from ..backends import detect_backend
from ..protocol import joined
from ..protocol.context import current_context
from ..utils.enums import DistributedType
from ..utils.replicas import ReplicaLocalDict
from ..utils.validation import check_bool, invalid
from .control import ProcessControl
from .options import StateOptions, parse_state_options
from .topology import Topology, detect_topology


def _create_state(cpu: bool, options: StateOptions) -> dict[str, Any]:
    """Everything the shared state holds, process group included; nothing is stored on failure."""
    backend = detect_backend(cpu)
    topo: Topology = detect_topology()
    group_backend = None
    distributed_type = DistributedType.NO
    if topo.launched:
        distributed_type = backend.distributed_type
        if distributed_type is DistributedType.NO:
            raise ValueError(
                f"this process is rank {topo.rank} of a {topo.world_size}-process job "
                f"({topo.source}), but {backend.name} devices cannot run multi-process jobs: "
                "pass cpu=True"
            )
        group_backend = _init_process_group(backend, topo, options)
    return {
        "_cpu": cpu,
        "_backend": backend,
        "_local_num_processes": topo.local_world_size,
        "backend": group_backend,
        "debug": options.debug,
        "device": backend.device_for(topo.local_rank),
        "distributed_type": distributed_type,
        "num_processes": topo.world_size,
        "process_index": topo.rank,
        "local_process_index": topo.local_rank,
    }


def _init_process_group(backend: Any, topo: Topology, options: StateOptions) -> str:
    import torch.distributed as dist

    if not backend.creates_process_group:  # XLA: collectives go through torch_xla itself
        return backend.process_group_backend
    device = backend.device_for(topo.local_rank)
    if topo.group_exists:
        backend.set_device(device)
        return str(dist.get_backend())
    settings = dict(options.process_group)
    name = settings.pop("backend", None) or backend.process_group_backend
    if name not in backend.process_group_backends:
        raise invalid(
            "backend",
            name,
            f"on {backend.name} devices use one of "
            + ", ".join(repr(b) for b in backend.process_group_backends),
        )
    backend.set_device(device)
    settings.setdefault("init_method", "env://")
    dist.init_process_group(name, rank=topo.rank, world_size=topo.world_size, **settings)
    _mark_joined(dist, name)
    return name


def _mark_joined(dist: Any, name: str) -> None:
    """In a launched worker, record in the job's store that this rank's gloo group is connected
    to every peer (see ``protocol/joined.py``): a rank done early then need not wait for the
    others before it exits. Best effort: unmarked, the others are waited for."""
    context = current_context()
    if context is None or name != "gloo" or not joined.connects_at_init():
        return
    try:
        store, restarts = dist.distributed_c10d._get_default_store(), context.restart_count
        joined.count(store, joined.connected_key(restarts), restarts, dist.get_world_size())
    except Exception:  # the store is the launcher's: a failure here only costs the wait
        pass


class PartialState(ProcessControl):
    """The job as seen by this process: rank, world size, device, process group.

    Every instance shares one state, created by the first instantiation in the process; later
    instantiations return the same state whatever their arguments. In a worker started by
    ``notebook_launcher`` or by torchrun the default process group is created at that moment
    (gloo on CPUs, nccl on GPUs), with no ``cpu=True`` needed to join the job.

    Args:
        cpu: use the CPU even where GPUs exist.
        **kwargs: ``torch.distributed.init_process_group`` settings (``backend``,
            ``init_method``, ``timeout``, ``pg_options``, ``device_id``), e.g.
            ``PartialState(**InitProcessGroupKwargs(timeout=...).to_kwargs())``;
            ``kwargs_handlers=[InitProcessGroupKwargs(...)]`` as an Accelerator takes them; and
            ``debug`` (default: the ``ACCELERATE_DEBUG_MODE`` switch).

    Attributes:
        device: the ``torch.device`` this process uses.
        distributed_type: a :class:`DistributedType` (``NO`` for a single process).
        backend: the process-group backend ("gloo", "nccl" ...), None without a group.
        num_processes, process_index, local_process_index: the job's size and this process's
            global and per-node index.
        debug: whether debug mode is on.

    Note:
        Unlike Accelerate, a job started by torchrun on CPUs forms one process group without
        ``cpu=True`` (Accelerate leaves such processes unconnected); a process group created
        before ``PartialState()`` is adopted; unknown keyword arguments are a TypeError; and a
        failed initialisation stores nothing, so the next ``PartialState()`` tries again. As in
        Accelerate, a launched job of one process still gets a process group (of one), so its
        ``distributed_type`` is ``MULTI_CPU``/``MULTI_GPU`` while ``use_distributed`` is False.

    Example:
        >>> state = PartialState()
        >>> state.process_index, state.num_processes
        (0, 1)
    """

    _shared_state = ReplicaLocalDict()  # per thread where XLA replicas are threads
    _known_attrs = (
        "_cpu",
        "_backend",
        "backend",
        "debug",
        "device",
        "distributed_type",
        "local_process_index",
        "num_processes",
        "process_index",
    )

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        if self.initialized:
            return
        check_bool("cpu", cpu)
        self._shared_state.update(_create_state(cpu, parse_state_options(kwargs)))

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._known_attrs or isinstance(getattr(type(self), name, None), property):
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r}: the shared state was reset "
                f"and not created again; call {type(self).__name__}() first."
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        backend = f"  Backend: {self.backend}" if self.backend else ""
        return (
            f"Distributed environment: {self.distributed_type.value}{backend}\n"
            f"Num processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )

    @staticmethod
    def _reset_state() -> None:
        """Forget the shared state (used between jobs and in tests)."""
        PartialState._shared_state.clear()

    @property
    def initialized(self) -> bool:
        """Whether the shared state exists."""
        return bool(self._shared_state)

    @classmethod
    def current(cls) -> PartialState | None:
        """The state of this process's job if one was created, else None (nothing is created).

        Note:
            Not in Accelerate: the library's own operations ask this instead of reading the
            shared dictionary.
        """
        return cls() if cls._shared_state else None

    @property
    def device_backend(self) -> Any:
        """The :class:`~notebook_launcher.backends.base.Backend` serving this job's device
        (``backend`` is the process group's name, as in Accelerate).

        Note:
            Not in Accelerate.
        """
        return self._backend

    @property
    def local_num_processes(self) -> int:
        """How many processes of the job run on this machine.

        Note:
            Not in Accelerate's public API.
        """
        return self._local_num_processes

    @property
    def use_distributed(self) -> bool:
        """Whether this is a job of several processes."""
        return self.distributed_type is not DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        """Whether this is the process of global index 0."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the process of index 0 on its node."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """Whether this is the process of the highest global index."""
        return self.process_index == self.num_processes - 1

    @property
    def default_device(self) -> torch.device:
        """The device a single process would use here (CUDA, then MPS, then the CPU)."""
        return detect_backend(self._cpu).device_for(0)

    def set_device(self) -> None:
        """Make :attr:`device` this process's current device."""
        self._backend.set_device(self.device)

    def wait_for_everyone(self) -> None:
        """Block until every process of the job reaches this call (no-op in a single process)."""
        if self.distributed_type is not DistributedType.NO:
            self._backend.barrier(self.device)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per node: on the local main process (the main process on one node)."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group``, or the default process group; nothing happens if none exists."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)
