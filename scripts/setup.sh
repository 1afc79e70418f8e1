#!/usr/bin/env bash
# Creates .venv with torch, numpy, dill, tqdm and the test tools, then installs flowpipe in editable mode.
# Without a GPU the CPU build of torch is installed, so no multi-GB CUDA build is ever downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0
VENV=.venv

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check"

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        $PIP "torch==$TORCH_VERSION"
    else
        # The CPU build: a local wheel where pip's find-links has one, else PyTorch's CPU index.
        $PIP "torch==$TORCH_VERSION+cpu" 2>/dev/null \
            || $PIP "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu
    fi
fi
# Checked from / so that the source tree in the current folder does not pass for an installed package.
if ! (cd / && "$OLDPWD/$VENV/bin/python" -c "import flowpipe, pytest, pytest_timeout, PIL, pandas, matplotlib, nbclient, ipykernel") 2>/dev/null; then
    log=$(mktemp)
    if ! $PIP -e ".[test]" >"$log" 2>&1; then
        cat "$log" >&2
        exit 1
    fi
    rm -f "$log"
fi
"$VENV/bin/python" -c "import flowpipe, torch; print(f'flowpipe ready (torch {torch.__version__})')"
