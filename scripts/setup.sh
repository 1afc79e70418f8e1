#!/usr/bin/env bash
# scripts/setup.sh [demo|test]: creates .venv with torch and installs flowpipe in editable mode with what it needs:
# - demo (the default; `make demo`, `make setup`): flowpipe's own dependencies numpy, dill and tqdm only;
# - test (`make test`): also the test extra: pytest, Jupyter's client and kernel, TensorBoard, ONNX, Dask, pandas...
# Without a GPU the CPU build of torch is installed, so no multi-GB CUDA build is ever downloaded.
# Prints one line per step it takes (a first run spends minutes in pip) and nothing of pip's own output unless
# a step fails; a second run finds everything in place and only says so.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-demo}
TORCH_VERSION=2.13.0
VENV=.venv
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)

step() {
    echo "setup: $*"
}

# Runs a command with its output kept aside, and shows that output only when the command fails.
quietly() {
    local log status=0
    log=$(mktemp)
    "$@" >"$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        cat "$log" >&2
    fi
    rm -f "$log"
    return "$status"
}

fail() {
    echo "setup: failed while $1 (the output above says why); fix it and run 'bash scripts/setup.sh $MODE' again" >&2
    exit 1
}

case "$MODE" in
    demo)
        IMPORTS="flowpipe"
        EXTRA=""
        WHAT="flowpipe (editable) and its dependencies numpy, dill and tqdm" ;;
    test)
        IMPORTS="flowpipe, pytest, pytest_timeout, PIL, pandas, matplotlib, nbclient, ipykernel, tensorboard, onnx, \
onnxscript, safetensors, psutil, distributed, hypothesis, torchmetrics, mlflow, wandb, fickling, sphinx"
        EXTRA="[test]"
        WHAT="flowpipe (editable) and the test tools: pytest, Jupyter's client, TensorBoard, ONNX, Dask... (minutes)" ;;
    *)
        echo "setup: Expected 'demo' or 'test'. Received: $MODE. Run 'bash scripts/setup.sh demo' or '... test'." >&2
        exit 2 ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
    step "creating the virtual environment $VENV"
    quietly python3 -m venv "$VENV" || fail "creating $VENV"
fi

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        step "installing torch $TORCH_VERSION with CUDA, for the GPU found (a few GB: several minutes)"
        quietly "${PIP[@]}" "torch==$TORCH_VERSION" || fail "installing torch"
    else
        step "installing torch $TORCH_VERSION, the CPU build (no GPU found; about a minute)"
        # The CPU build: a local wheel where pip's find-links has one, else PyTorch's CPU index.
        "${PIP[@]}" "torch==$TORCH_VERSION+cpu" >/dev/null 2>&1 \
            || quietly "${PIP[@]}" "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu \
            || fail "installing torch"
    fi
fi

# Checked from / so that the source tree in the current folder does not pass for an installed package.
if ! (cd / && "$OLDPWD/$VENV/bin/python" -c "import $IMPORTS") 2>/dev/null; then
    step "installing $WHAT"
    quietly "${PIP[@]}" -e ".$EXTRA" || fail "installing $WHAT"
fi
"$VENV/bin/python" -c "import flowpipe, torch; print(f'setup: ready: flowpipe in $VENV (torch {torch.__version__})')"
