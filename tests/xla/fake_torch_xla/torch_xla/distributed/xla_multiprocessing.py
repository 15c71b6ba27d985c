"""TEST DOUBLE of torch_xla.distributed.xla_multiprocessing: spawn with 2.9's semantics."""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from .. import _fake


class _SpawnFn:
    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args

    def __call__(self) -> Any:
        import torch_xla.runtime as xr

        return self.fn(xr.global_ordinal(), *self.args)


def _env_int(name: str, default: int) -> int:
    return max(1, int(os.environ.get(name, default)))


def _run_thread_per_device(
    process_index: int, processes: int, threads: int, fn: Callable[[], Any]
) -> list[Any]:
    world = processes * threads

    def one(device: int) -> Any:
        _fake.enter(
            process_index * threads + device, process_index * threads + device, world, threads
        )
        return fn()

    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(threads)))


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> Any:
    spawn_fn = _SpawnFn(fn, *args)
    if nprocs == 1:
        _fake.enter(0, 0, 1, 1)  # runs here, in the caller, and starts its runtime
        return spawn_fn()
    if nprocs is not None:
        raise ValueError(
            f"Unsupported nprocs ({nprocs}). Please use nprocs=1 or None (default). If None, "
            "spawn will use all available devices. Use the environment variable X_NUM_DEVICES "
            "(where X is CPU, TPU, NEURONCORE, etc) to limit the number of devices used."
        )
    if _fake.initialized():
        raise RuntimeError(
            "Runtime is already initialized. Do not use the XLA device before calling xmp.spawn."
        )
    import torch.distributed as dist

    device = (os.environ.get("PJRT_DEVICE") or "CPU").upper()
    devices = _env_int(f"{device}_NUM_DEVICES", 1)
    processes = min(devices, _env_int("FAKE_XLA_PROCESSES", 1))
    threads = devices // processes  # FAKE_XLA_PROCESSES must divide the device count
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    os.environ[_fake.STORE_ENV] = f"127.0.0.1:{store.port}"
    context = multiprocessing.get_context(start_method)
    with concurrent.futures.ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
        run = functools.partial(
            _run_thread_per_device, processes=processes, threads=threads, fn=spawn_fn
        )
        results = list(pool.map(run, range(processes)))
    del store
    return [r for per_process in results for r in per_process]
