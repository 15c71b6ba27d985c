"""A kernel SIGKILLed at any moment (a session idle, a call running, results coming back) leaves
no file in /dev/shm and no process 5 s later, with no later launch needed (its janitor removes the
files once it and its workers are gone); a launch still reclaims the files of kernels that died
without a janitor, and never the files of a kernel that still runs."""

from __future__ import annotations

import dataclasses
import os
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid

import psutil
import pytest
import torch

from notebook_launcher import notebook_launcher as launch
from notebook_launcher.protocol import results, shared_files

MB = 1 << 20
RESULT_MB = 96  # per rank: the kernel's peak is about 6 x this (workers, files, its mappings)
BOUND = 120.0  # seconds: a generous limit for anything that should take a few
PROMISE = 5.0  # seconds after the kill: no file of the kernel's left, no process of its left
MARKER = "NOTEBOOK_LAUNCHER_LEAK_TRIAL"  # in the environment of a kernel and of its workers

# The kernel: launches two ranks that each return a large tensor, says when it starts and ends,
# then waits to be killed (with its results mapped).
KERNEL = textwrap.dedent(
    f"""
    import sys, torch
    from notebook_launcher import notebook_launcher

    def large():
        return torch.ones({RESULT_MB} * {MB} // 4)

    print("launching", flush=True)
    result = notebook_launcher(large, num_processes=2, ui="none")
    assert all(float(v[-1]) == 1.0 for v in result)
    print("done", flush=True)
    sys.stdin.read()
    """
)

# When each kernel is killed: (what it waits for, then how many seconds more). "launching": the
# kernel is about to launch; "file": its first result file appeared in /dev/shm; "received": the
# files appeared and are all gone again (mapped by the kernel); "done": the launch returned. A
# kernel that passes a file moment unseen is killed at "done". Only the spread depends on timing.
MOMENTS = [
    ("launching", 0.0),
    ("launching", 1.0),
    ("file", 0.0),
    ("file", 0.03),
    ("file", 0.08),
    ("file", 0.15),
    ("file", 0.25),
    ("file", 0.4),
    ("received", 0.0),
    ("done", 0.0),
]

# The same transfer from a session that stays open, idle before and after its calls: its workers
# return the tensors to one call, then rank 0 sleeps while rank 1 waits for it in a collective.
SESSION_KERNEL = textwrap.dedent(
    f"""
    import sys, time, torch
    import torch.distributed as dist
    from notebook_launcher import Session, PartialState

    def large():
        return torch.ones({RESULT_MB} * {MB} // 4)

    def waits():
        if PartialState().process_index == 0:
            time.sleep(600)
        dist.barrier()

    session = Session(num_processes=2, ui="none")
    session.run(lambda: None)
    print("open", flush=True)
    time.sleep(1.0)
    print("launching", flush=True)
    result = session.run(large)
    assert all(float(v[-1]) == 1.0 for v in result)
    print("done", flush=True)
    time.sleep(0.5)
    print("waiting", flush=True)
    session.run(waits)
    """
)
SESSION_MOMENTS = [
    ("open", 0.3),  # idle
    ("launching", 0.0),
    ("file", 0.0),
    ("file", 0.08),
    ("file", 0.25),
    ("received", 0.0),
    ("done", 0.2),  # idle, with the results mapped
    ("waiting", 0.5),  # a call waiting in a collective
]


def free():
    return None


def files_of(pid: int) -> dict[str, int]:
    """The /dev/shm files named after process ``pid``, whatever its start time: bytes held."""
    found = {}
    for name in os.listdir(shared_files.SHARED_MEMORY_DIRECTORY):
        owner = shared_files.owner_of(name)
        if owner is not None and owner.pid == pid:
            try:
                found[name] = os.stat(
                    os.path.join(shared_files.SHARED_MEMORY_DIRECTORY, name)
                ).st_blocks
            except FileNotFoundError:
                continue
    return {name: blocks * 512 for name, blocks in found.items()}


def marked(trial: str) -> list[psutil.Process]:
    """Live processes started by the kernel of ``trial`` (they inherit its environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARKER) == trial:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except psutil.Error:
            continue
    return found


@dataclasses.dataclass
class Aftermath:
    """What a killed kernel left: files and bytes in /dev/shm just before the kill, and how long
    after the kill its last file and its last process were gone (None: not within PROMISE)."""

    files: int
    held: int
    files_gone: float | None
    processes_gone: float | None


class Kernel:
    """A kernel process whose lines are read in the background."""

    def __init__(self, script: str = KERNEL) -> None:
        self.trial = uuid.uuid4().hex
        env = {**os.environ, MARKER: self.trial}
        self.stderr = tempfile.TemporaryFile()  # a pipe nobody reads could fill and block it
        self.process = subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.pid = self.process.pid
        self.lines: queue.Queue[str] = queue.Queue()
        self.said: set[str] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.decode().strip())

    def heard(self, word: str) -> bool:
        while not self.lines.empty():
            self.said.add(self.lines.get())
        return word in self.said

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-4000:]

    def kill(self) -> Aftermath:
        """SIGKILL it, then watch (for PROMISE seconds at most) its files and processes go."""
        files = files_of(self.pid)
        killed = time.monotonic()
        self.process.kill()
        files_gone = processes_gone = None
        while time.monotonic() - killed < PROMISE:
            now = time.monotonic() - killed
            if files_gone is None and not files_of(self.pid):
                files_gone = now
            if processes_gone is None and not marked(self.trial):
                processes_gone = now
            if files_gone is not None and processes_gone is not None:
                break
            time.sleep(0.002)
        self.process.communicate(timeout=BOUND)
        return Aftermath(len(files), sum(files.values()), files_gone, processes_gone)

    def reap_everything(self) -> None:
        """Cleanup whatever happened: the kernel, its workers, its files."""
        try:
            if self.process.poll() is None:
                self.process.kill()
            self.process.communicate(timeout=BOUND)
        finally:
            for proc in marked(self.trial):
                proc.kill()
            for name in files_of(self.pid):
                shared_files.remove(os.path.join(shared_files.SHARED_MEMORY_DIRECTORY, name))
            self.stderr.close()


def kill_at(kernel: Kernel, event: str, delay: float) -> Aftermath:
    """Kill ``kernel`` ``delay`` seconds after ``event`` (a file moment passed unseen: at
    "done"); what it left."""
    deadline = time.monotonic() + BOUND
    appeared = False
    while time.monotonic() < deadline:
        assert kernel.process.poll() is None, f"the kernel ended by itself:\n{kernel.errors()}"
        present = bool(files_of(kernel.pid))
        appeared = appeared or present
        if present and event == "file" or appeared and not present and event == "received":
            break
        if kernel.heard(event) or event in ("file", "received") and kernel.heard("done"):
            break
        time.sleep(0.001)
    else:
        raise AssertionError(f"the kernel never reached {event!r}:\n{kernel.errors()}")
    time.sleep(delay)
    return kernel.kill()


def kill_at_moments(script: str, moments: list[tuple[str, float]]) -> list[Aftermath]:
    """A kernel running ``script`` killed at each of ``moments``: what each left; fails unless
    each one's files and processes were gone within PROMISE seconds of its kill."""
    kernels: list[Kernel] = []
    left = []
    try:
        for event, delay in moments:
            kernel = Kernel(script)
            kernels.append(kernel)
            aftermath = kill_at(kernel, event, delay)
            left.append(aftermath)
            where = f"killed {delay} s after {event!r}"
            assert aftermath.processes_gone is not None, f"{where}: {marked(kernel.trial)} ran on"
            assert aftermath.files_gone is not None, f"{where}: {files_of(kernel.pid)} stayed"
    finally:
        for kernel in kernels:
            kernel.reap_everything()
    print(
        f"\n{len(left)} kernels killed, {sum(1 for a in left if a.files)} with files in /dev/shm "
        f"({sum(a.held for a in left) / MB:.0f} MiB in all); gone after the kill, files: "
        f"{', '.join(f'{a.files_gone:.3f}' for a in left)} s; processes: "
        f"{', '.join(f'{a.processes_gone:.3f}' for a in left)} s"
    )
    return left


@pytest.mark.timeout(900)
def test_a_kernel_killed_at_any_moment_of_a_launch_leaves_nothing_within_5_s():
    left = kill_at_moments(KERNEL, MOMENTS)
    # Not a test of luck: at least one kernel died with its result files in /dev/shm.
    assert any(a.files for a in left)


@pytest.mark.timeout(600)
def test_a_kernel_killed_at_any_moment_of_a_session_leaves_nothing_within_5_s():
    left = kill_at_moments(SESSION_KERNEL, SESSION_MOMENTS)
    assert any(a.files for a in left)


@pytest.fixture
def sleeper():
    """A live process that is not a kernel, but stands for one; reaped whatever happens."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait(timeout=BOUND)


def fake_file(owner: shared_files.Owner, size: int = MB) -> str:
    """A file in /dev/shm named as a result file of ``owner``, holding ``size`` bytes."""
    path = os.path.join(
        shared_files.SHARED_MEMORY_DIRECTORY,
        shared_files.file_name(owner, f"result-{uuid.uuid4().hex[:16]}"),
    )
    with open(path, "wb") as file:
        file.write(b"\1" * size)
    return path


def gone_pid() -> int:
    """The pid of a process that ended (and nobody has taken since, in all likelihood)."""
    process = subprocess.Popen(["true"])
    process.wait(timeout=BOUND)
    return process.pid


@pytest.fixture
def made():
    """Paths of files a test made, removed whatever happens."""
    paths: list[str] = []
    yield paths
    for path in paths:
        shared_files.remove(path)


def test_a_launch_keeps_the_files_of_a_live_kernel_and_reclaims_them_once_it_is_gone(sleeper, made):
    path = shared_files.shared_memory_path(sleeper.pid, "result-" + uuid.uuid4().hex[:16])
    with open(path, "wb") as file:
        file.write(b"\1" * MB)
    made.append(path)

    launch(free, num_processes=1, ui="none")
    assert os.path.exists(path)  # its kernel still runs: it may map the file any moment

    sleeper.kill()
    sleeper.wait(timeout=BOUND)
    launch(free, num_processes=1, ui="none")
    assert not os.path.exists(path)


def test_a_file_named_for_a_pid_that_another_process_took_since_is_reclaimed(made):
    me = shared_files.owner_now(os.getpid())  # a live process, as a kernel is
    assert me.start is not None and me.scope is not None
    mine = fake_file(me)
    earlier = fake_file(dataclasses.replace(me, start=me.start - 1))  # that pid's former owner
    made.extend([mine, earlier])

    assert shared_files.reclaim_orphans() >= MB
    assert not os.path.exists(earlier)
    assert os.path.exists(mine)
    assert shared_files.leftover_files(os.getpid()) == [
        mine
    ]  # the live kernel's helpers still see it


def test_a_killed_kernel_not_yet_reaped_counts_as_gone(sleeper, made):
    owner = shared_files.owner_now(sleeper.pid)
    path = fake_file(owner)
    made.append(path)
    sleeper.kill()
    deadline = time.monotonic() + BOUND
    while psutil.Process(sleeper.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)

    assert shared_files.process_start(sleeper.pid) is None
    shared_files.reclaim_orphans()
    assert not os.path.exists(path)


def test_files_the_launch_cannot_tell_the_owner_of_are_kept(made):
    dead = shared_files.owner_now(gone_pid())
    other_namespaces = dataclasses.replace(dead, start=1, scope="1.1")  # a container's, say
    without_start = shared_files.Owner(dead.pid)  # /proc could not tell when it was written
    paths = [fake_file(other_namespaces), fake_file(without_start)]
    made.extend(paths)
    stranger = os.path.join(
        shared_files.SHARED_MEMORY_DIRECTORY, f"{shared_files.SHARED_MEMORY_PREFIX}x-y"
    )
    with open(stranger, "wb"):
        pass
    made.append(stranger)

    shared_files.reclaim_orphans()
    assert all(os.path.exists(path) for path in paths + [stranger])


def test_a_worker_whose_kernel_is_gone_keeps_its_result_in_the_pickle():
    # The kernel is a process that already ended: the file would outlive everyone.
    pid = gone_pid()
    tensor = torch.ones(MB)
    payload = results.dumps(tensor, pid)
    assert len(payload) > tensor.nbytes
    assert files_of(pid) == {}
