#!/usr/bin/env bash
# Collect, on a machine that reaches the package index, the wheels the GPU lane
# (scripts/test_gpu.sh) installs on a GPU machine that has no network.
#
# The GPU machine is expected to carry Python 3.12 (x86-64 Linux) with torch (CUDA), accelerate,
# lightning, transformers, pytest, hypothesis, psutil, cloudpickle, numpy and safetensors. What it
# lacks, and what is downloaded here for CPython 3.12 manylinux x86-64 with every dependency, is
# the real-kernel stack: ipykernel, ipywidgets, jupyter_client, nbval (and pytest-timeout, which
# the test configuration uses). Wheels of what the GPU machine already has are left out, torch
# above all. The folder, .gpu-wheels/ (ignored by git), must travel with the working tree, whose
# ignored extras may weigh 64 MiB at most: the size is printed and checked.
#
# Usage: scripts/gpu_wheels.sh            (again at any time: the folder is rebuilt)
# Environment: PYTHON (the interpreter whose pip downloads; default .venv/bin/python or python3),
#              GPU_WHEELS (the folder; default .gpu-wheels), GPU_PYTHON_VERSION (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/dev_python.sh
PY=$(dev_python)
DEST=${GPU_WHEELS:-.gpu-wheels}
PYVER=${GPU_PYTHON_VERSION:-3.12}
LIMIT_MIB=48 # well under the 64 MiB that ignored paths may add to the working tree's copy

# What the lane needs and the GPU machine lacks.
WANTED=(ipykernel ipywidgets jupyter_client nbval pytest-timeout)
# Present on the GPU machine (with their own dependencies): never downloaded for it. Names as
# pip normalises them in wheel file names (lower case, "-" and "." as "_").
PRESENT=(torch numpy psutil cloudpickle safetensors pytest pluggy iniconfig hypothesis
    sortedcontainers packaging pyyaml filelock fsspec jinja2 markupsafe sympy mpmath networkx
    typing_extensions setuptools triton)

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT

echo "== downloading ${WANTED[*]} and their dependencies for CPython $PYVER manylinux x86-64"
"$PY" -m pip download --quiet --dest "$staging" \
    --python-version "$PYVER" --implementation cp --abi "cp${PYVER/./}" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64 \
    --only-binary=:all: "${WANTED[@]}"

removed=()
for wheel in "$staging"/*.whl; do
    name=$(basename "$wheel" | cut -d- -f1 | tr '[:upper:].' '[:lower:]_')
    for present in "${PRESENT[@]}"; do
        if [ "$name" = "$present" ]; then
            removed+=("$name")
            rm -f "$wheel"
        fi
    done
done

rm -rf "$DEST"
mkdir -p "$DEST"
mv "$staging"/*.whl "$DEST"/
count=$(find "$DEST" -name '*.whl' | wc -l)
kib=$(du -sk "$DEST" | cut -f1)
echo "== $count wheels in $DEST: $((kib / 1024)) MiB (${kib} KiB)"
if [ "${#removed[@]}" -gt 0 ]; then
    echo "   left out, already on the GPU machine: ${removed[*]}"
fi
if [ "$kib" -gt $((LIMIT_MIB * 1024)) ]; then
    echo "FAILED: $DEST weighs more than $LIMIT_MIB MiB; it must travel within 64 MiB" >&2
    exit 1
fi
echo "== ready: scripts/test_gpu.sh installs from $DEST with --no-index"
