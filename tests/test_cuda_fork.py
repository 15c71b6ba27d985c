"""Finding out, without initialising anything, whether the kernel has initialised CUDA, and who did.

Where no GPU exists, the driver is a TEST DOUBLE: a small C library built here and named
``libcuda.so.1`` that answers ``cuDeviceGetCount`` as the real driver does (error 3,
CUDA_ERROR_NOT_INITIALIZED, until ``cuInit`` is called). The probe finds it the way it finds the real
one: in ``/proc/self/maps``, opened with ``RTLD_NOLOAD``. The tests marked ``gpu`` use the real driver.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from notebook_launcher.utils import cuda_fork
from notebook_launcher.utils.environment import cuda_device_count

DRIVER_DOUBLE = r"""
static int initialised = 0;
int cuInit(unsigned int flags) { (void)flags; initialised = 1; return 0; }
int cuDeviceGetCount(int *count) { if (!initialised) return 3; *count = 0; return 0; }
"""


@pytest.fixture(scope="module")
def driver_double(tmp_path_factory):
    folder = tmp_path_factory.mktemp("driver-double")
    source = folder / "driver.c"
    source.write_text(DRIVER_DOUBLE)
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler is needed to build the driver test double"
    library = folder / "libcuda.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60
    )
    runtime = folder / "libcudart.so.12"
    shutil.copy(library, runtime)
    return library, runtime


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _state_json() -> str:
    return "dataclasses.asdict(cuda_fork.probe())"


def test_driver_double_probe_sees_initialisation_only_after_cuinit(driver_double):
    library, runtime = driver_double
    found = _run(
        f"""
        import ctypes, dataclasses, json
        from notebook_launcher.utils import cuda_fork
        before = {_state_json()}
        # Asking about a driver that is not loaded must not load it.
        unknown = cuda_fork.driver_initialized({str(library)!r})
        still_unloaded = cuda_fork.loaded_driver(cuda_fork.mapped_libraries()) is None
        lib = ctypes.CDLL({str(library)!r})
        loaded = {_state_json()}
        lib.cuInit(0)
        after = {_state_json()}
        ctypes.CDLL({str(runtime)!r})
        with_runtime = {_state_json()}
        print(json.dumps(dict(before=before, unknown=unknown, still_unloaded=still_unloaded,
                              loaded=loaded, after=after, with_runtime=with_runtime)))
        """
    )
    assert found["before"]["by_driver"] is None and not found["before"]["initialized"]
    assert found["unknown"] is None and found["still_unloaded"]
    assert found["loaded"]["by_driver"] is False and not found["loaded"]["initialized"]
    assert found["after"]["by_driver"] is True and found["after"]["initialized"]
    assert not found["after"]["by_torch"]
    assert found["with_runtime"]["likely_sources"] == [
        "the CUDA runtime (libcudart), loaded by a library other than torch"
    ]
    what, why = cuda_fork.fork_finding_text(cuda_fork.CudaForkState(**found["with_runtime"]))
    assert "outside torch" in what and "libcudart" in what and "initialization error" in why


def test_culprit_is_the_first_call_that_initialised_cuda():
    """A TEST DOUBLE of ``torch.cuda`` (a module whose ``_lazy_init`` flips a flag) gets wrapped."""
    found = _run(
        """
        import json, sys, types
        from notebook_launcher.utils import cuda_fork
        fake = types.ModuleType("fakecuda")
        fake.flag = False
        fake.is_initialized = lambda: fake.flag
        def _lazy_init():
            fake.flag = True
        fake._lazy_init = _lazy_init
        memory = types.ModuleType("fakecuda.memory")
        memory._lazy_init = _lazy_init
        sys.modules["fakecuda"] = fake
        sys.modules["fakecuda.memory"] = memory
        assert cuda_fork.install_culprit_recorder(fake)
        assert cuda_fork.install_culprit_recorder(fake)  # once only
        namespace = {"sys": sys}
        exec(compile("def load_model():\\n    sys.modules['fakecuda.memory']._lazy_init()\\n",
                     "/notebook/cell7.py", "exec"), namespace)
        namespace["load_model"]()
        first = cuda_fork._recorder.culprit
        fake._lazy_init()  # a later call changes nothing
        print(json.dumps(dict(first=first, later=cuda_fork._recorder.culprit,
                              shared=memory._lazy_init is fake._lazy_init,
                              original=fake._lazy_init.__wrapped__ is _lazy_init)))
        """
    )
    assert found["shared"] and found["original"]
    assert "/notebook/cell7.py, line 2, in load_model" in found["first"]
    assert found["later"] == found["first"]


def test_recorder_is_transparent_on_a_torch_without_cuda():
    found = _run(
        """
        import json, torch
        import notebook_launcher
        from notebook_launcher.utils import cuda_fork
        wrapped = getattr(torch.cuda._lazy_init, "_notebook_launcher_recorder", False)
        errors = []
        for attempt in (torch.cuda._lazy_init, lambda: torch.zeros(1, device="cuda")):
            try:
                attempt()
            except Exception as exc:
                errors.append(type(exc).__name__)
        print(json.dumps(dict(wrapped=wrapped, errors=errors, culprit=cuda_fork._recorder.culprit,
                              initialized=cuda_fork.probe().initialized)))
        """
    )
    assert found["wrapped"]
    if cuda_device_count() == 0:
        assert len(found["errors"]) == 2  # the same errors torch raises unwrapped
        assert found["culprit"] is None and not found["initialized"]


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() == 0, reason="needs a CUDA GPU")
def test_real_driver_and_culprit_on_a_gpu():
    found = _run(
        """
        import dataclasses, json, torch
        import notebook_launcher
        from notebook_launcher.utils import cuda_fork
        before = dataclasses.asdict(cuda_fork.probe())
        def load_model():
            return torch.zeros(1, device="cuda")
        load_model()
        print(json.dumps(dict(before=before, after=dataclasses.asdict(cuda_fork.probe()))))
        """
    )
    assert not found["before"]["initialized"]
    assert found["after"]["by_torch"] and found["after"]["by_driver"] is True
    assert "in load_model" in found["after"]["culprit"]


def test_mapped_libraries_reads_a_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05\n"
        "7f01-7f02 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n"
        "7f03-7f04 r-xp 00000000 08:01 2 /opt/conda/lib/python3.11/site-packages/cupy/_core.so\n"
        "7f05-7f06 rw-s 00000000 00:05 3 /dev/shm/x (deleted)\n"
    )
    libraries = cuda_fork.mapped_libraries(str(maps))
    assert libraries == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05",
        "/opt/conda/lib/python3.11/site-packages/cupy/_core.so",
        "/dev/shm/x",
    ]
    assert cuda_fork.loaded_driver(libraries) == libraries[0]
    assert cuda_fork.likely_sources(libraries) == ("CuPy",)
    assert cuda_fork.mapped_libraries(str(tmp_path / "missing")) == []


def test_preflight_offers_spawn_and_auto_switches(driver_double):
    """The kernel holds a CUDA context made outside torch (the driver TEST DOUBLE, cuInit called)."""
    library, _ = driver_double
    found = _run(
        f"""
        import ctypes, json, threading
        from notebook_launcher import notebook_launcher, PreflightError

        def square(x):
            return x * x

        ctypes.CDLL({str(library)!r}).cuInit(0)
        errors = {{}}
        for name, args in (("picklable", (3,)), ("lock", (threading.Lock(),))):
            try:
                notebook_launcher(square, args=args, num_processes=2, ui="none")
            except PreflightError as exc:
                errors[name] = str(exc)
        auto = notebook_launcher(square, args=(3,), num_processes=2, ui="none", start_method="auto")
        spawn = notebook_launcher(square, args=(4,), num_processes=2, ui="none", start_method="spawn")
        print(json.dumps(dict(errors=errors, auto=auto.values, spawn=spawn.values)))
        """
    )
    picklable, lock = found["errors"]["picklable"], found["errors"]["lock"]
    assert "outside torch" in picklable and "initialization error" in picklable
    assert "start_method='spawn'" in picklable and "start_method='auto'" in picklable
    assert "args[0] (_thread.lock) cannot be pickled" in lock
    assert found["auto"] == [9, 9] and found["spawn"] == [16, 16]


def test_auto_switch_is_announced_in_one_line(driver_double):
    library, _ = driver_double
    code = f"""
import ctypes
from notebook_launcher import notebook_launcher

def one():
    return 1

ctypes.CDLL({str(library)!r}).cuInit(0)
print(notebook_launcher(one, num_processes=1, ui="none", start_method="auto").values)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    notices = [line for line in done.stderr.splitlines() if "spawn instead of fork" in line]
    assert notices == [
        "notebook_launcher: CUDA has already been initialised in this kernel, outside torch "
        "(the driver says so). Starting the workers by spawn instead of fork."
    ]
    assert done.stdout.strip().endswith("[1]")


def _worker_cuda_facts():
    import torch

    bad_fork = torch.cuda._is_in_bad_fork()
    value = torch.ones(1, device="cuda").sum().item()
    return bad_fork, value


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() == 0, reason="needs a CUDA GPU")
def test_forked_workers_are_not_in_a_bad_fork():
    from notebook_launcher import notebook_launcher

    result = notebook_launcher(
        _worker_cuda_facts, num_processes=min(2, cuda_device_count()), ui="none"
    )
    assert all(bad is False and value == 1.0 for bad, value in result.values)
