"""The janitor of a killed kernel: it removes the kernel's files once the kernel is gone, waits for
the workers the kernel told it of (a file one creates meanwhile is removed too), is not held up by
processes forked from the kernel, is started again when killed, and ends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
from helpers.processtree import is_helper

from notebook_launcher.launch.processes import janitor
from notebook_launcher.protocol import shared_files

MB = 1 << 20
PROMISE = 5.0  # seconds after the kill
BOUND = 120.0

# Outlives its kernel for a moment (no PR_SET_PDEATHSIG here), creating one more file in the
# kernel's name after the kernel is gone, as a worker killed in the middle of creating it would.
WORKER = textwrap.dedent(
    """
    import os, sys, time
    kernel, late = int(sys.argv[1]), sys.argv[2]
    while os.getppid() == kernel:
        time.sleep(0.005)
    time.sleep(0.2)
    with open(late, "wb") as file:
        file.write(b"x" * (1 << 20))
    time.sleep(0.3)
    """
)

KERNEL = textwrap.dedent(
    f"""
    import os, subprocess, sys, time
    from notebook_launcher.launch.processes import janitor
    from notebook_launcher.protocol import shared_files

    def path(token):
        owner = shared_files.owner_now(os.getpid())
        return os.path.join(shared_files.SHARED_MEMORY_DIRECTORY, shared_files.file_name(owner, token))

    worker = subprocess.Popen([sys.executable, "-c", {WORKER!r}, str(os.getpid()), path("late")])
    janitor.watch(worker.pid)
    first = janitor._janitor
    first.kill()  # a janitor that was killed is started again, told of the workers watched so far
    first.wait()
    janitor.watch(worker.pid)
    forked = os.fork()  # a child of the kernel that outlives it does not keep the janitor waiting
    if forked == 0:
        time.sleep(60)
        os._exit(0)
    with open(path("early"), "wb") as file:
        file.write(b"x" * {MB})
    print(janitor._janitor.pid, forked, worker.pid, flush=True)
    time.sleep(600)
    """
)


def files_of(pid: int) -> list[str]:
    return [n for n in os.listdir(shared_files.SHARED_MEMORY_DIRECTORY) if _named_after(n, pid)]


def _named_after(name: str, pid: int) -> bool:
    owner = shared_files.owner_of(name)
    return owner is not None and owner.pid == pid


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_killed_kernels_janitor_removes_its_files_after_its_workers_and_ends():
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True)
    forked = None
    try:
        janitor_pid, forked, worker = (int(word) for word in kernel.stdout.readline().split())
        assert is_helper(psutil.Process(janitor_pid))
        assert os.getsid(janitor_pid) == janitor_pid  # out of reach of the kernel's interrupts
        assert [n.split("-")[2].split(".")[0] for n in files_of(kernel.pid)] == ["early"]

        kernel.kill()
        killed = time.monotonic()
        seen = set()
        while time.monotonic() - killed < PROMISE:
            present = files_of(kernel.pid)
            seen.update(n.split("-")[2].split(".")[0] for n in present)
            if not present and not running(janitor_pid) and not running(worker):
                break
            time.sleep(0.002)
        gone = time.monotonic() - killed
        print(f"\nfiles gone, worker and janitor ended {gone:.3f} s after the kill")
        assert files_of(kernel.pid) == []
        assert seen == {"early", "late"}  # the worker's late file was there, and was removed
        assert not running(janitor_pid) and not running(worker)
        assert running(forked)  # still there: the janitor did not wait for it
    finally:
        if kernel.poll() is None:
            kernel.kill()
        kernel.wait(BOUND)
        kernel.stdout.close()
        if forked is not None and running(forked):
            os.kill(forked, 9)
        for name in files_of(kernel.pid):
            shared_files.remove(os.path.join(shared_files.SHARED_MEMORY_DIRECTORY, name))


def test_the_janitor_of_a_kernel_that_ends_normally_ends_with_it():
    script = textwrap.dedent(
        """
        import subprocess
        from notebook_launcher.launch.processes import janitor
        sleeper = subprocess.Popen(["sleep", "0.5"])
        janitor.watch(sleeper.pid)
        sleeper.wait()
        print(janitor._janitor.pid, flush=True)
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    pid = int(run.stdout.split()[-1])
    deadline = time.monotonic() + PROMISE
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not running(pid)


def test_watching_a_process_that_is_gone_starts_no_janitor():
    gone = subprocess.Popen(["true"])
    gone.wait()
    before = janitor._janitor
    janitor.watch(gone.pid)
    assert janitor._janitor is before
    assert gone.pid not in janitor._watched
