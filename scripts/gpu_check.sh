#!/usr/bin/env bash
# flowpipe's CUDA paths on one GPU, in at most BUDGET seconds (default 480), most important first: the engine kinds
# against the CPU, the other gpu-marked tests that one GPU can run, two ranks sharing the GPU, a deterministic run
# twice, then the benchmarks' GPU arms. Each step has its own budget: a step that would end past the whole budget is
# skipped and reported, and `timeout` stops one that outruns its own. Each step's output goes to a file beside a
# summary, report.md (at most 8 files: report.md and 7 steps).
#
# Usage: bash scripts/gpu_check.sh [--plan] [REPORT_DIR]
#   --plan      print the steps and their budgets, run nothing; the last line is `total: N s`
#   REPORT_DIR  default: $OUT where it is set (the folder a lent GPU machine sends back), else gpu-report
# PYTHON names the interpreter (default: .venv/bin/python where it exists, else python3); flowpipe is imported from
# this checkout (PYTHONPATH), never installed. A dependency python3 lacks (dill on the lent GPU machines) is
# installed from .gpu-wheels/ (made by scripts/gpu_wheels.sh) into a temporary folder with `pip --no-index`.
# Exit status: 0 when every step passed; 1 when one failed, timed out or was skipped; 2 when nothing could run (no
# CUDA device, or a missing import with no wheel for it).
set -uo pipefail
cd "$(dirname "$0")/.."
BUDGET=${BUDGET:-480}
WHEELS=.gpu-wheels
SETUP=15                # seconds kept for the CUDA probe and the wheels' install
STEPS=(engines gpu_tests ranks deterministic bench_speed bench_small bench_randomness)
declare -A SECONDS_FOR=([engines]=60 [gpu_tests]=95 [ranks]=80 [deterministic]=35 [bench_speed]=100
                        [bench_small]=75 [bench_randomness]=20)
declare -A ABOUT=(
    [engines]='engine kinds on cuda:0, GPU:0x2, CPU+GPU, micro-batches, model parallel GPU+CPU, amp; vs the CPU'
    [gpu_tests]='other gpu-marked tests for one GPU: pinned copies, save on GPU / load on CPU, layouts, SAM...'
    [ranks]='two ranks sharing the GPU: DDP and sharding over gloo, NCCL refusing them; one-rank NCCL sharding'
    [deterministic]='run(deterministic=True) twice on the GPU: bit-identical parameters and losses'
    [bench_speed]='bench/speed.py, GPU arms: naive loop vs flowpipe options (cnn, resnet18)'
    [bench_small]='bench/replicas.py --reduction (GPU:0x2), bench/checkpoint_activations.py, bench/augment.py (cuda)'
    [bench_randomness]="bench/randomness.py: dropout masks by item vs torch's generator, CPU and GPU arms")

step_command() {        # the command of step $1, one word per line of the array it fills: CMD
    local pytest=("$PYTHON" -m pytest -q -rfEs -p no:cacheprovider)
    case $1 in
        engines) CMD=("${pytest[@]}" tests/parallel/test_one_gpu.py -k 'not deterministic');;
        gpu_tests) CMD=("${pytest[@]}" -m gpu tests --ignore=tests/parallel/test_one_gpu.py
                        --ignore=tests/parallel/test_shared_gpu_ranks.py --ignore=tests/parallel/test_sharded_gpu.py);;
        ranks) CMD=("${pytest[@]}" tests/parallel/test_shared_gpu_ranks.py tests/parallel/test_sharded_gpu.py);;
        deterministic) CMD=(env CUBLAS_WORKSPACE_CONFIG=:4096:8 "${pytest[@]}" tests/parallel/test_one_gpu.py
                            -k deterministic);;
        bench_speed) CMD=("$PYTHON" bench/speed.py --no-cpu --networks cnn resnet18 --rounds 3 --iters 8);;
        bench_small) CMD=(bash -c '"$0" bench/replicas.py --reduction --no-cpu --steps 5 --blocks 7 &&
                             "$0" bench/checkpoint_activations.py --device cuda --rounds 3 --steps 5 &&
                             "$0" bench/augment.py --device cuda --repeats 4' "$PYTHON");;
        bench_randomness) CMD=("$PYTHON" bench/randomness.py --rounds 3 --steps 5);;
    esac
}

plan() {
    local total=$SETUP name
    printf '%-16s %5s s  %s\n' setup "$SETUP" "the CUDA probe; dill and other missing imports from $WHEELS/"
    for name in "${STEPS[@]}"; do
        printf '%-16s %5s s  %s\n' "$name" "${SECONDS_FOR[$name]}" "${ABOUT[$name]}"
        total=$((total + SECONDS_FOR[$name]))
    done
    echo "total: $total s"
}

if [ "${1:-}" = --plan ]; then
    plan
    exit 0
fi
DIR=${1:-${OUT:-gpu-report}}
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
SITE=$(mktemp -d "${TMPDIR:-/tmp}/flowpipe-gpu-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 FLOWPIPE_SLOW=1

probe=$("$PYTHON" -c 'import torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(n, torch.cuda.get_device_name(0) if n else "-", torch.__version__, torch.version.cuda, sep="|")') || {
    echo "gpu_check: Expected a python with torch. Received: $PYTHON cannot import torch. Set PYTHON= to one that" \
         "can." >&2; exit 2; }
IFS='|' read -r gpus gpu_name torch_version cuda_version <<< "$probe"
if [ "$gpus" -eq 0 ]; then
    echo "gpu_check: Expected a CUDA device. Received: torch sees none here (torch $torch_version, CUDA build" \
         "$cuda_version). Run it on a GPU machine with a CUDA build of torch." >&2
    exit 2
fi

missing=$("$PYTHON" -c 'import importlib.util as u
print(*(m for m in ("dill", "tqdm", "numpy", "pytest", "pytest_timeout") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
    echo "gpu_check: installing $missing from $WHEELS/ into $SITE"
    # shellcheck disable=SC2086  # one name per word
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
        --find-links "$WHEELS" --target "$SITE" $missing || {
        echo "gpu_check: Expected wheels for $missing in $WHEELS/. Received: pip found none there (no network" \
             "here). Run \`bash scripts/gpu_wheels.sh\` where pip reaches an index, and carry $WHEELS." >&2
        exit 2; }
fi
# bench/pipeline.py's GPU arm runs one rank per GPU over NCCL: not on this check's one GPU
if [ "$gpus" -lt 2 ]; then
    pipeline_note="bench/pipeline.py: not run: its 2 ranks need a GPU each (NCCL refuses two ranks on one GPU, and"
    pipeline_note+=" gloo, which lets ranks share one, does not send CUDA tensors between ranks, as the stages do)"
else
    pipeline_note="bench/pipeline.py: not run by this one-GPU check; on these $gpus GPUs: python bench/pipeline.py"
    pipeline_note+=" --device cuda (2 ranks, NCCL)"
fi
echo "gpu_check: $pipeline_note"
mkdir -p "$DIR"
report="$DIR/report.md"
{
    echo "# flowpipe GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'): $gpus GPU(s), $gpu_name; torch $torch_version, CUDA $cuda_version;" \
         "$PYTHON; budget $BUDGET s"
    echo
    echo "$pipeline_note"
    echo
    echo '| step | result | seconds | budget |'
    echo '|---|---|---|---|'
} > "$report"
tails=$(mktemp "${TMPDIR:-/tmp}/flowpipe-gpu-tails.XXXXXX")
trap 'rm -rf "$SITE" "$tails"' EXIT
failed=0

run_step() {            # run_step NAME: run it if its budget fits, keep its output, add its line to the report
    local name=$1 limit=${SECONDS_FOR[$1]} result start status
    if [ $((SECONDS + limit)) -gt "$BUDGET" ]; then
        result="skipped: $((BUDGET - SECONDS)) s left, it needs $limit s"
        failed=1
        echo "| $name | $result | 0 | $limit |" >> "$report"
        echo "gpu_check: $name: $result"
        return
    fi
    step_command "$name"
    echo "gpu_check: $name (at most $limit s) ..."
    start=$SECONDS
    timeout --kill-after=5 "$limit" "${CMD[@]}" > "$DIR/$name.txt" 2>&1
    status=$?
    case $status in
        0) result=pass;;
        124|137) result="timed out (stopped at $limit s)"; failed=1;;
        *) result="fail (exit $status)"; failed=1;;
    esac
    echo "| $name | $result | $((SECONDS - start)) | $limit |" >> "$report"
    {
        echo "## $name: $result"
        echo
        echo '```'
        echo "${CMD[*]}"
        tail -n 15 "$DIR/$name.txt"
        echo '```'
        echo
    } >> "$tails"
    echo "gpu_check: $name: $result"
}

for name in "${STEPS[@]}"; do
    run_step "$name"
done
{ echo; echo "Total: $SECONDS s. Each step's whole output: NAME.txt beside this file."; echo; cat "$tails"; } \
    >> "$report"
echo "gpu_check: the outputs are in $DIR/, the summary in $report"
exit "$failed"
