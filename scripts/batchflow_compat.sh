#!/usr/bin/env bash
# Runs batchflow 0.10.1's own test files against flowpipe through an import alias and prints, per file, how many of
# the tests batchflow itself passes on this machine pass on flowpipe, and the total. Downloads the batchflow wheel
# (for its test files only) into a temporary folder; no batchflow code is imported: scripts/batchflow_alias.py maps
# every `batchflow[.x]` import onto `flowpipe[.x]`. The tests batchflow passes are listed in
# scripts/batchflow_tests_reference.json (made with --reference VENV: the same files run on batchflow itself).
# research_test's CIFAR10() reads, in both runs, a small generated stand-in of CIFAR-10's archive (random images in
# its format: scripts/cifar10_standin.py), since the machine has no network; scripts/batchflow_shim makes
# `import batchflow` resolve to flowpipe in the processes the tests start too.
# Not part of the default suite (it needs the package index).
# Usage: bash scripts/batchflow_compat.sh [-v] [--core | --models]
#   --core: the pipeline core and Research files only; --models: the networks, layers, metrics, components,
#   transforms and save/load files only; -v also lists, per file, each reason of failure (the first line of the
#   error) with the number of tests it fails.
# bash scripts/batchflow_compat.sh --notebooks instead runs the code cells of batchflow's examples/ notebooks (from
# its source distribution) on flowpipe, imports aliased and data swapped for Digits (scripts/batchflow_notebooks.py),
# and compares with the cells that run on batchflow itself (scripts/batchflow_notebooks_reference.json).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PY:-$ROOT/.venv/bin/python}
VERSION=0.10.1
CORE="config config_basic dataset datasetindex common_index filesindex named_expr rebatch save_to research"
MODELS="torch_layers torch_models torch_models_compile model_save_load metrics regression_metrics components
components_batch assemble transforms detachable test_loss apply_parallel"
FILES="core: $CORE models: $MODELS"
VERBOSE=""
REFERENCE=""
while [ $# -gt 0 ]; do
    case "$1" in
        -v) VERBOSE=-v ;;
        --core) FILES="core: $CORE" ;;
        --models) FILES="models: $MODELS" ;;
        --notebooks) break ;;
        --reference) REFERENCE=$2; shift ;;
        *) echo "Expected -v, --core, --models, --notebooks or --reference VENV. Received: $1" >&2; exit 2 ;;
    esac
    shift
done
FILES=$(echo $FILES)
NAMES=""                                # the file names, without the group labels
for f in $FILES; do case "$f" in *:) ;; *) NAMES="$NAMES $f" ;; esac; done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

PIP="$PY -m pip -q --disable-pip-version-check"
if [ "${1:-}" = "--notebooks" ]; then
    NOTEBOOKS="01_batch_operations 02_pipeline_operations 03_ready_to_use_model_torch 04_image_augmentation 05_sampler 06_profiling 07_tracking"
    $PIP download --no-deps --no-binary :all: "batchflow==$VERSION" -d "$TMP/dist" >"$TMP/pip.log" 2>&1 \
        || { cat "$TMP/pip.log" >&2; echo "Could not download the batchflow $VERSION sources." >&2; exit 1; }
    tar xzf "$TMP"/dist/*.tar.gz -C "$TMP"
    # the notebooks draw with matplotlib, use pandas and scipy: installed into the temporary folder if absent
    EXTRA=""
    if ! "$PY" -c "import matplotlib, pandas, scipy" 2>/dev/null; then
        $PIP install --target "$TMP/site" matplotlib pandas scipy >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; exit 1; }
        rm -rf "$TMP"/site/numpy* "$TMP"/site/PIL "$TMP"/site/pillow*    # keep the environment's own
        EXTRA=":$TMP/site"
    fi
    PYTHONPATH="$ROOT/scripts$EXTRA" timeout 1800 "$PY" "$ROOT/scripts/batchflow_notebooks.py" \
        "$TMP"/batchflow-$VERSION/examples $NOTEBOOKS --json "$TMP/notebooks.json" 2>"$TMP/notebooks.log" \
        || { tail -20 "$TMP/notebooks.log" >&2; exit 1; }
    "$PY" "$ROOT/scripts/batchflow_report.py" --notebooks "$TMP/notebooks.json" \
        "$ROOT/scripts/batchflow_notebooks_reference.json"
    exit 0
fi
if ! $PIP download --no-deps --only-binary :all: "batchflow==$VERSION" -d "$TMP/dist" >"$TMP/pip.log" 2>&1; then
    cat "$TMP/pip.log" >&2
    echo "Could not download the batchflow $VERSION wheel (the check needs the package index)." >&2
    exit 1
fi
mkdir "$TMP/tests"
"$PY" - "$TMP" "$NAMES" <<'PY'
import glob, sys, zipfile
tmp, files = sys.argv[1], sys.argv[2].split()
wanted = {f'batchflow/tests/{name}_test.py' for name in files} | {'batchflow/tests/conftest.py'}
with zipfile.ZipFile(glob.glob(f'{tmp}/dist/*.whl')[0]) as wheel:
    for name in wanted:
        with open(f'{tmp}/tests/{name.rsplit("/", 1)[1]}', 'wb') as out:
            out.write(wheel.read(name))
PY
# named_expr_test and research_test need pandas (flowpipe's optional `pandas` extra), research_test psutil (it
# counts child processes): installed into the temporary folder if absent
EXTRA=""
if ! "$PY" -c "import pandas" 2>/dev/null; then
    $PIP install --no-deps --target "$TMP/site" pandas python-dateutil six tzdata >"$TMP/pip.log" 2>&1 \
        || { cat "$TMP/pip.log" >&2; exit 1; }
    EXTRA=":$TMP/site"
fi
if ! "$PY" -c "import psutil" 2>/dev/null; then
    $PIP install --no-deps --target "$TMP/site" psutil >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; exit 1; }
    EXTRA=":$TMP/site"
fi

# research_test trains on CIFAR10(), which downloads (no network here): both runs read instead the same small
# generated stand-in of the archive (scripts/cifar10_standin.py: random images in CIFAR-10's format, not CIFAR-10),
# put where each looks: batchflow in the system's temporary folder ($TMPDIR), flowpipe in $FLOWPIPE_DATA/cifar10
"$PY" "$ROOT/scripts/cifar10_standin.py" "$TMP/data/cifar10"

cd "$TMP/tests"
TESTS=$(for f in $NAMES; do echo "${f}_test.py"; done)
if [ -n "$REFERENCE" ]; then
    # batchflow itself (installed in the environment REFERENCE, without the alias) on the same files
    TMPDIR="$TMP/data/cifar10" "$REFERENCE/bin/python" -m pytest -q -p no:cacheprovider -o timeout=1800 --continue-on-collection-errors \
        --junitxml="$TMP/report.xml" $TESTS >"$TMP/pytest.log" 2>&1 || true
    "$PY" "$ROOT/scripts/batchflow_report.py" --reference "$ROOT/scripts/batchflow_tests_reference.json" \
        "$TMP/report.xml"
    exit 0
fi
# $ROOT first: the checkout's own flowpipe, whatever flowpipe the environment has installed; the alias is a pytest
# plugin in the test process, and scripts/batchflow_shim makes `import batchflow` install it in the processes tests
# start (Research's workers import the test module, which imports batchflow)
FLOWPIPE_DATA="$TMP/data" PYTHONPATH="$ROOT:$ROOT/scripts/batchflow_shim:$ROOT/scripts$EXTRA" "$PY" -m pytest -q -p batchflow_alias -p no:cacheprovider -o timeout=600 \
    --continue-on-collection-errors --junitxml="$TMP/report.xml" $TESTS >"$TMP/pytest.log" 2>&1 || true
"$PY" "$ROOT/scripts/batchflow_report.py" "$TMP/report.xml" "$ROOT/scripts/batchflow_tests_reference.json" "$FILES" \
    $VERBOSE
