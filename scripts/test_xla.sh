#!/usr/bin/env bash
# Opt-in real lane: run the XLA contract tests (tests/xla/) against the real torch_xla on CPU.
#
# Builds its own virtual environment outside the repository (torch==2.9.0, torch-xla==2.9.0,
# about 7 GB), installs this package into it, then runs the contract tests twice:
#   PJRT_DEVICE=CPU                    one device, one replica process
#   PJRT_DEVICE=CPU CPU_NUM_DEVICES=2  two replicas as threads of one process
# Usage: scripts/test_xla.sh [pytest args]
# Environment: XLA_VENV (where the environment lives), PYTHON (interpreter for the venv),
#              XLA_INSTALL_ONLY=1 (build the environment and stop).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${XLA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/notebook_launcher/xla-venv}
NEED_GB=12

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch_xla" 2>/dev/null; then
    parent=$(dirname "$VENV")
    mkdir -p "$parent"
    free_gb=$(df -Pk "$parent" | awk 'NR == 2 {print int($4 / 1048576)}')
    if [ "$free_gb" -lt "$NEED_GB" ]; then
        echo "SKIPPED: the real XLA lane needs about ${NEED_GB} GB free under $parent; ${free_gb} GB are free."
        exit 0
    fi
    echo "== building $VENV (torch==2.9.0 torch-xla==2.9.0, about 7 GB)"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    if ! "$VENV/bin/python" -m pip install -q torch==2.9.0 torch-xla==2.9.0; then
        echo "FAILED: pip install torch==2.9.0 torch-xla==2.9.0 into $VENV (network or disk)." >&2
        exit 1
    fi
fi
# The package with its declared dependencies, torch held at the version torch_xla was built for.
"$VENV/bin/python" -m pip install -q torch==2.9.0 -e . pytest pytest-timeout
[ "${XLA_INSTALL_ONLY:-0}" = 1 ] && { echo "== environment ready: $VENV"; exit 0; }

"$VENV/bin/python" - <<'INFO'
import importlib.metadata as md
print("== torch", md.version("torch"), "| torch_xla", md.version("torch_xla"))
INFO
status=0
run() {
    echo "== $* python -m pytest tests/xla"
    env "$@" "$VENV/bin/python" -m pytest tests/xla -p no:cacheprovider -q -rs \
        -o addopts="" --override-ini="python_files=test_*.py" "${EXTRA[@]}" || status=1
}
EXTRA=("$@")
run NOTEBOOK_LAUNCHER_XLA_LANE=real PJRT_DEVICE=CPU CPU_NUM_DEVICES=1
run NOTEBOOK_LAUNCHER_XLA_LANE=real PJRT_DEVICE=CPU CPU_NUM_DEVICES=2
echo "== real XLA lane: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
