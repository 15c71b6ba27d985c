#!/usr/bin/env bash
# The GPU lane: every test marked `gpu`, then the GPU training benchmark, in one command, on a
# machine with a CUDA GPU and no network (under 8 minutes on one H100).
#
# It uses the machine's own python3 and its CUDA build of torch (torch is never installed here),
# installs the real-kernel stack (ipykernel, ipywidgets, jupyter_client, nbval ...) from the wheels
# that scripts/gpu_wheels.sh collected into .gpu-wheels/ (--no-index, into a folder of its own put
# on PYTHONPATH; nothing is installed into the system), and imports notebook_launcher from this
# working tree. Results: a JUnit XML, the pytest log, the benchmark's output and a short summary
# (date, card, torch, passed/failed/skipped) in $OUT when it is set, else in build/gpu-lane/.
# On a machine without a CUDA GPU it says so, runs nothing and exits 0.
#
# Usage: scripts/test_gpu.sh [pytest args]   the whole lane
#        scripts/test_gpu.sh --collect       list the tests the lane runs (works without a GPU)
# Environment: PYTHON (the interpreter; default python3, for --collect .venv/bin/python where it
#              exists), GPU_WHEELS (default .gpu-wheels), GPU_LANE_TESTS_TIMEOUT (seconds for the
#              tests, default 330), GPU_LANE_BENCH_TIMEOUT (seconds for the benchmark, default 120).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# Every test marked gpu: the GPU folder, and those that live beside their CPU counterparts.
TESTS=(tests/gpu tests/test_cuda_fork.py tests/launch/test_launch_validation.py)
WHEELS=${GPU_WHEELS:-.gpu-wheels}
PYTEST_FLAGS=(-m gpu -p no:cacheprovider)

if [ "${1:-}" = "--collect" ]; then
    shift
    source scripts/dev_python.sh
    PY=$(dev_python)
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" -m pytest --collect-only -q "${PYTEST_FLAGS[@]}" "${TESTS[@]}" "$@"
fi

PY=${PYTHON:-python3}
RESULTS=${OUT:-build/gpu-lane}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)

# -- is there a CUDA GPU? (asked through NVML, as the launcher asks: no CUDA context here) -------
why_not=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
    why_not="nvidia-smi is not on PATH (no NVIDIA driver)"
elif ! "$PY" -c "import torch" 2>/dev/null; then
    why_not="$PY cannot import torch"
elif ! "$PY" - <<'PROBE' 2>/dev/null; then
import os, sys
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
import torch
sys.exit(0 if torch.backends.cuda.is_built() and torch.cuda.device_count() > 0 else 1)
PROBE
    why_not="torch on $PY sees no CUDA GPU (CPU-only build, or no device visible)"
fi
if [ -n "$why_not" ]; then
    echo "GPU lane: nothing was run: $why_not."
    echo "GPU lane: it runs on a machine with a CUDA GPU; scripts/test_gpu.sh --collect lists its tests."
    exit 0
fi

# -- the real-kernel stack from the carried wheels ----------------------------------------------
SITE=$ROOT/build/gpu-site
note=""
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    rm -rf "$SITE"
    mkdir -p "$SITE"
    echo "== installing $(find "$WHEELS" -name '*.whl' | wc -l) wheels from $WHEELS into $SITE (no index)"
    # --no-deps: the folder holds every dependency the machine lacks (scripts/gpu_wheels.sh).
    if ! "$PY" -m pip install --quiet --no-index --no-deps --no-compile \
        --disable-pip-version-check --target "$SITE" "$WHEELS"/*.whl; then
        echo "   (pip could not install them: unpacking the wheels instead)"
        rm -rf "$SITE"
        mkdir -p "$SITE"
        "$PY" - "$SITE" "$WHEELS"/*.whl <<'UNPACK'
import sys, zipfile
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(sys.argv[1])
UNPACK
    fi
    export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
    if ! "$PY" -c "import ipykernel, ipywidgets, jupyter_client, nbval" 2>/dev/null; then
        note="the wheels of $WHEELS/ do not import with $PY: the real-kernel tests skip"
        echo "WARNING: $note" >&2
    fi
else
    note="$WHEELS/ was not found: the real-kernel tests skip (run scripts/gpu_wheels.sh where the package index is reachable and carry $WHEELS)"
    echo "WARNING: $note" >&2
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

card=$(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd ',' - | sed 's/, */, /g')
torch_version=$("$PY" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda)")
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
echo "== GPU lane on: $card | $("$PY" -V 2>&1) | torch $torch_version"
"$PY" -c "import notebook_launcher, sys; print('== notebook_launcher from', notebook_launcher.__file__)"

# -- the tests ---------------------------------------------------------------------------------
set +e
timeout --signal=INT --kill-after=30 "${GPU_LANE_TESTS_TIMEOUT:-330}" \
    "$PY" -m pytest "${PYTEST_FLAGS[@]}" "${TESTS[@]}" -v -rsfE --durations=15 \
    --junitxml="$RESULTS/junit.xml" "$@" 2>&1 | tee "$RESULTS/pytest.log"
tests_status=${PIPESTATUS[0]}
# -- the benchmark -----------------------------------------------------------------------------
timeout --signal=INT --kill-after=15 "${GPU_LANE_BENCH_TIMEOUT:-120}" \
    "$PY" benchmarks/gpu_train_bench.py --json "$RESULTS/gpu_train_bench.json" 2>&1 |
    tee "$RESULTS/gpu_train_bench.log"
bench_status=${PIPESTATUS[0]}
set -e

# -- the summary -------------------------------------------------------------------------------
"$PY" - "$RESULTS" "$started" "$card" "$torch_version" "$tests_status" "$bench_status" "$note" <<'SUMMARY'
import json, os, sys
import xml.etree.ElementTree as ET

results, started, card, torch_version, tests_status, bench_status, note = sys.argv[1:8]
counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
failed = []
junit = os.path.join(results, "junit.xml")
if os.path.exists(junit):
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None:
            counts["failed"] += 1
            failed.append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            failed.append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
lines = [
    "GPU lane (scripts/test_gpu.sh)",
    f"date: {started}",
    f"card: {card}",
    f"torch: {torch_version}",
    f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
    f"{counts['skipped']} skipped (pytest exit status {tests_status}"
    + ("; no JUnit XML was written" if not os.path.exists(junit) else "") + ")",
]
lines += [f"  not passed: {name}" for name in failed]
bench = os.path.join(results, "gpu_train_bench.json")
if os.path.exists(bench):
    with open(bench, encoding="utf-8") as f:
        for row in json.load(f).get("summary", []):
            lines.append(f"benchmark: {row}")
else:
    lines.append(f"benchmark: no result (exit status {bench_status})")
if note:
    lines.append(f"note: {note}")
text = "\n".join(lines) + "\n"
with open(os.path.join(results, "summary.txt"), "w", encoding="utf-8") as f:
    f.write(text)
print("\n" + text, end="")
SUMMARY
echo "== results in $RESULTS"
if [ "$tests_status" -ne 0 ] || [ "$bench_status" -ne 0 ]; then
    exit 1
fi
