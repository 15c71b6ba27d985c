"""Where the first launch in a fresh Jupyter kernel spends its time, against the launch after it.

For each N of ``--sizes`` and ``--kernels`` times: a fresh ipykernel (``kernel_bench.Kernel``)
runs ``import notebook_launcher`` (timed in the kernel), waits ``--settle`` seconds (0: the
launch is in the next cell at once), then launches ``kernel_bench``'s job (``PartialState()`` and
one ``all_reduce``) at N three ways, each timed in the kernel: the first launch, split into the
wait for the background imports still under way (``launch/processes/warmup.py``: the launch's
fork waits for them) and the call, with the modules the cell imported counted; the second launch (warm); bare ``torch.multiprocessing`` fork of the same job.
With ``--cprofile`` the first launch runs under cProfile (wall clock) and its heaviest entries
are printed (this slows the launch: read the shares, not the totals). ``--baseline DIR``: every
fresh kernel is paired with one importing notebook_launcher from another checkout (``before``),
the two taken in turns.

    python benchmarks/first_launch_profile.py [--sizes 2,8] [--kernels 3] [--settle 3]
        [--cprofile] [--baseline DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from kernel_bench import Kernel, free_port
from session_bench import close_checked, result

IMPORT = """
import json, time
_t0 = time.perf_counter()
import notebook_launcher
print("RESULT", json.dumps({"import": time.perf_counter() - _t0}))
"""

FIRST = """
import json, sys, time, launch_bench
_before = set(sys.modules)
_t0 = time.perf_counter()
from notebook_launcher import notebook_launcher
from notebook_launcher.launch.processes import warmup as _warmup
_tw = time.perf_counter()
_warmup._wait_for_thread()  # what the launch's fork would wait for
_t1 = time.perf_counter()
_profile = None
if {cprofile}:
    import cProfile
    _profile = cProfile.Profile()
    _profile.enable()
notebook_launcher(launch_bench.partial_state, num_processes={n}, use_port={port})
_t2 = time.perf_counter()
if _profile is not None:
    _profile.disable()
    import io, pstats
    _text = io.StringIO()
    pstats.Stats(_profile, stream=_text).sort_stats("cumulative").print_stats(35)
    print(_text.getvalue())
_new = sorted(set(sys.modules) - _before)
print("RESULT", json.dumps({{"from import": _tw - _t0, "warm-up wait": _t1 - _tw,
    "first call": _t2 - _t1,
    "first": _t2 - _t0, "modules": len(_new), "some": [m for m in _new if "." not in m][:40]}}))
"""

WARM = """
_t0 = time.perf_counter()
notebook_launcher(launch_bench.partial_state, num_processes={n}, use_port={port})
_t1 = time.perf_counter()
launch_bench.launch_bare(launch_bench.partial_state, (), {n}, {port2})
print("RESULT", json.dumps({{"warm": _t1 - _t0, "bare": time.perf_counter() - _t1}}))
"""


def one(n: int, settle: float, cprofile: bool, path: str | None = None) -> dict:
    kernel = Kernel(path)
    try:
        got = result(kernel.run(IMPORT))
        if settle:
            time.sleep(settle)
        printed = kernel.run(FIRST.format(n=n, port=free_port(), cprofile=cprofile), timeout=120)
        if cprofile:
            print(printed.rsplit("RESULT", 1)[0])
        got.update(result(printed))
        got.update(result(kernel.run(WARM.format(n=n, port=free_port(), port2=free_port()))))
        return got
    finally:
        close_checked(kernel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8")
    parser.add_argument("--kernels", type=int, default=3, help="fresh kernels per N")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after the import")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--baseline", help="another checkout: its notebook_launcher as 'before'")
    parser.add_argument("--json", help="write every sample here")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    if options.kernels < 1 or min(sizes) < 1 or options.settle < 0:
        parser.error("--kernels and every size must be at least 1, --settle at least 0")
    print(f"load average {os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} CPUs", flush=True)
    paths = {"after": None}
    if options.baseline:
        paths["before"] = os.path.abspath(options.baseline)
    samples = {(lane, n): [] for lane in paths for n in sizes}
    for round_ in range(options.kernels):
        lanes = list(paths)[round_ % len(paths) :] + list(paths)[: round_ % len(paths)]
        for n in sizes:
            for lane in lanes:
                samples[lane, n].append(one(n, options.settle, options.cprofile, paths[lane]))
    keys = ("import", "warm-up wait", "first call", "first", "warm", "bare")
    print(
        f"\nseconds, median of {options.kernels} fresh kernels; the launch {options.settle:g} s "
        "after `import notebook_launcher`"
    )
    print(
        f"{'N':>3} {'lane':<7}"
        + "".join(f"{k:>13}" for k in keys)
        + f"{'first/warm':>12}{'warm/bare':>11}"
    )
    for (lane, n), got in samples.items():
        med = {k: statistics.median(s[k] for s in got) for k in keys}
        print(
            f"{n:>3} {lane:<7}"
            + "".join(f"{med[k]:13.3f}" for k in keys)
            + f"{med['first'] / med['warm']:11.2f}x{med['warm'] / med['bare']:10.2f}x"
        )
        print(
            f"            modules the first launch's cell imported: {got[-1]['modules']} "
            f"(packages: {', '.join(got[-1]['some']) or 'none'})"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if options.json:
        with open(options.json, "w") as f:
            json.dump({f"{lane}:{n}": got for (lane, n), got in samples.items()}, f, indent=1)


if __name__ == "__main__":
    main()
