"""Workers forked after the kernel ran OpenMP in parallel still run OpenMP in parallel.

A large tensor operation in the kernel starts GNU OpenMP's thread pool; without care, a worker
forked afterwards inherits the pool's bookkeeping without its threads and hangs at its first
parallel region (with more than one thread per process).
"""

from __future__ import annotations

import os
import threading

import torch

from notebook_launcher import notebook_launcher
from notebook_launcher.utils.openmp import openmp_runtimes, release_thread_pools

MB = 1 << 20
# One worker with two threads; the stall timeout makes a regression fail instead of hanging.
TWO_THREADS = dict(num_processes=1, threads_per_process=2, ui="none", stall_timeout=20, timeout=60)


def kernel_parallel_work() -> None:
    """What a notebook cell does: large operations on every core (the pool starts)."""
    torch.set_num_threads(2)
    a = torch.arange(8 * MB, dtype=torch.float32)
    assert float((a * 2).sum()) > 0


def large_parallel_operation():
    assert torch.get_num_threads() == 2
    x = torch.ones(8 * MB)
    return float((x * 3).sum()), len(os.listdir("/proc/self/task"))


def test_the_torch_wheel_uses_an_openmp_runtime_this_module_finds():
    assert torch.__config__.parallel_info().count("OpenMP") >= 1
    assert any("gomp" in path or "omp" in path for path in openmp_runtimes())


def test_a_worker_forked_after_the_kernel_ran_openmp_runs_it_in_parallel():
    threads = torch.get_num_threads()
    try:
        kernel_parallel_work()
        result = notebook_launcher(large_parallel_operation, **TWO_THREADS)
        value, worker_threads = result.main
        assert value == 3.0 * 8 * MB
        assert worker_threads >= 2  # the worker started a pool of its own
        kernel_parallel_work()  # and the kernel's next parallel region starts a new one
    finally:
        torch.set_num_threads(threads)


def test_releasing_the_pool_joins_its_threads_and_the_next_region_starts_new_ones():
    threads = torch.get_num_threads()
    try:
        kernel_parallel_work()
        before = {t.native_id for t in threading.enumerate()}
        tasks = set(map(int, os.listdir("/proc/self/task")))
        assert release_thread_pools() != []
        after = set(map(int, os.listdir("/proc/self/task")))
        assert after < tasks  # the pool's threads (not Python threads) are gone
        assert {t.native_id for t in threading.enumerate()} == before
        kernel_parallel_work()
    finally:
        torch.set_num_threads(threads)


def test_a_background_launch_after_openmp_work_in_the_kernel_runs_it_in_parallel():
    from notebook_launcher import launch_in_background

    threads = torch.get_num_threads()
    try:
        kernel_parallel_work()  # the main thread's pool; the launch forks from another thread
        handle = launch_in_background(large_parallel_operation, **TWO_THREADS)
        value, _ = handle.wait(timeout=90).main
        assert value == 3.0 * 8 * MB
        kernel_parallel_work()
    finally:
        torch.set_num_threads(threads)
