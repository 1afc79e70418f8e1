#!/usr/bin/env bash
# Downloads, as wheels, the Python packages that scripts/gpu_check.sh needs and a GPU machine without network lacks,
# into .gpu-wheels/ (ignored by git). The check installs from there with `pip install --no-index` when an import is
# missing; carry the folder to the GPU machine with the checkout (docs/performance.md, "GPU check").
#
# Usage: bash scripts/gpu_wheels.sh [REQUIREMENT ...]
#   Default: dill, the one dependency of flowpipe that the lent GPU machines' python3 lacks (torch, numpy, tqdm,
#   pytest and pytest-timeout are there). Name others as pip requirements: `bash scripts/gpu_wheels.sh dill tqdm`.
# PYTHON names the interpreter that runs pip (default: .venv/bin/python, else python3); GPU_PYTHON_VERSION the GPU
# machine's Python (default 3.12). Wheels for that Python and x86-64 Linux only: pure-Python ones fit any machine.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
WHEELS=.gpu-wheels
[ "$#" -gt 0 ] || set -- 'dill>=0.3.6'
mkdir -p "$WHEELS"
"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "${GPU_PYTHON_VERSION:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "$@"
echo "gpu_wheels: $WHEELS/ holds: $(cd "$WHEELS" && ls -- *.whl | tr '\n' ' ')"
