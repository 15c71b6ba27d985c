"""TEST DOUBLE of torch_xla (not the real package), for the default test lane without torch_xla.

It imitates what notebook_launcher uses of torch_xla 2.9 on the CPU (``PJRT_DEVICE=CPU``):
``xmp.spawn`` (refuses ``nprocs`` other than None/1, runs ``nprocs=1`` in the caller, pickles
``fn`` and ``args``, starts replica processes through a ProcessPoolExecutor and, with
``CPU_NUM_DEVICES=N``, N replicas as threads of one process), ``torch_xla.runtime`` ordinals and
sizes, ``xm.all_reduce``/``all_gather``/``rendezvous``/``mesh_reduce`` done with gloo across
real processes and threads, and ``MpDeviceLoader`` with torch_xla's reading and transfer threads
(``xm.send_cpu_data_to_device`` copies, turning tuples into lists). Devices are the CPU. ``FAKE_XLA_PROCESSES=P`` spreads the
``CPU_NUM_DEVICES`` replicas over P processes (one per device as on TPU v4 hosts) where the real
package on the CPU always starts one process.
Installed only for the XLA tests, through sys.path / PYTHONPATH.
"""

from __future__ import annotations

import torch

from . import _fake

IS_TEST_DOUBLE = True
__version__ = "2.9.0+fake"


class _XLAC:
    @staticmethod
    def _xla_runtime_is_initialized() -> bool:
        return _fake.initialized()


def device(index: int | None = None) -> torch.device:
    """The replica's device (the CPU in this double); starts the runtime like the real one."""
    _fake.initialize()
    return torch.device("cpu")


def sync() -> None:
    """Nothing to execute lazily in this double."""
