#!/usr/bin/env bash
# Every CUDA path of flowpipe in one command, on the first GPU machine at hand: the gpu-marked tests (slow ones
# included) and the GPU arm of every benchmark that has one, each command's output in one folder and a summary
# (report.md) with each command's exit status and last lines.
#
# Usage: bash scripts/gpu_check.sh [REPORT_DIR]        (default: gpu-report; run `make setup` first)
# PYTHON names the interpreter (default: .venv/bin/python); LIMIT the seconds each command may run (default 1200).
# Exit status: 0 when every command passed, 1 when one failed, 2 when no CUDA device is visible (nothing run).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
LIMIT=${LIMIT:-1200}
OUT=${1:-gpu-report}

gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)') || {
    echo "gpu_check: $PYTHON cannot import torch. Run \`make setup\` first, or set PYTHON=." >&2; exit 2; }
if [ "$gpus" -eq 0 ]; then
    echo "gpu_check: Expected a CUDA device. Received: torch sees none here ($("$PYTHON" -c \
'import torch; print("torch", torch.__version__, "CUDA build", torch.version.cuda)')). Run it on a GPU machine \
with a CUDA build of torch." >&2
    exit 2
fi
mkdir -p "$OUT"
report="$OUT/report.md"
{
    echo "# flowpipe GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $gpus GPU(s), $("$PYTHON" -c \
'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "-", torch.cuda.get_device_name(0))')"
    echo
} > "$report"
failed=0

check() {       # check NAME COMMAND...: run it, keep its output, add its status and last lines to the report
    local name=$1; shift
    echo "gpu_check: $name ..."
    timeout "$LIMIT" "$@" > "$OUT/$name.txt" 2>&1
    local status=$?
    [ "$status" -eq 0 ] || failed=1
    {
        echo "## $name: exit $status"
        echo
        echo '```'
        echo "$*"
        tail -n 25 "$OUT/$name.txt"
        echo '```'
        echo
    } >> "$report"
    echo "gpu_check: $name: exit $status"
}

export FLOWPIPE_SLOW=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
check tests "$PYTHON" -m pytest -m gpu -q -rA -p no:cacheprovider tests
check speed "$PYTHON" bench/speed.py --networks cnn resnet18 --rounds 4
check augment "$PYTHON" bench/augment.py --device cuda
check replicas "$PYTHON" bench/replicas.py --rounds 3
check replicas_reduction "$PYTHON" bench/replicas.py --reduction
check distributed "$PYTHON" bench/distributed.py --rounds 2
check sharding "$PYTHON" bench/sharding.py --rounds 2
check randomness "$PYTHON" bench/randomness.py --rounds 5
echo "gpu_check: the outputs are in $OUT/, the summary in $report"
exit "$failed"
