"""scripts/gpu_check.sh: its plan fits the budget; it refuses to run without a CUDA device; with one it takes
python3 where there is no .venv, installs a missing dill from .gpu-wheels/ with pip --no-index, runs its steps
within the budget (skipping, and reporting, one that would overrun) and writes report.md beside each step's output.

The script runs from a copy of it in a folder of its own (no .venv there), against a stand-in python3 on PATH that
answers the script's questions as a one-GPU machine without dill would, and records every command it is given."""
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / 'scripts' / 'gpu_check.sh'
STEPS = ['engines', 'gpu_tests', 'ranks', 'deterministic', 'bench_speed', 'bench_small', 'bench_randomness']

# A one-GPU machine's python: torch sees one CUDA device; dill is missing until pip has installed it into a folder
# on PYTHONPATH; pip finds it only where .gpu-wheels holds a dill wheel; the augment benchmark (in bench_small) fails.
FAKE_PYTHON = r'''#!/usr/bin/env bash
if [ "$1" = "-c" ]; then
    case "$2" in
        *device_count*) echo "1|Fake H100 80GB|2.11.0+cu130|13.0";;
        *find_spec*) for folder in ${PYTHONPATH//:/ }; do [ -e "$folder/dill/__init__.py" ] && exit 0; done
                     echo dill;;
    esac
    exit 0
fi
echo "$(basename "$0") $*" >> "$CALLS"
if [ "$1 $2 $3" = "-m pip install" ]; then
    ls .gpu-wheels/dill-*.whl > /dev/null 2>&1 || { echo "ERROR: No matching distribution found for dill"; exit 1; }
    while [ "$#" -gt 0 ]; do [ "$1" = --target ] && mkdir -p "$2/dill" && touch "$2/dill/__init__.py"; shift; done
    exit 0
fi
echo "output of $*"
echo "PYTHONPATH=$PYTHONPATH"
case "$*" in *bench/augment.py*) exit 3;; esac
exit 0
'''


def executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def checkout(tmp_path):
    """A folder holding the script alone (no .venv), a wheel folder with dill, and the stand-in python3 on PATH."""
    repo = tmp_path / 'repo'
    (repo / 'scripts').mkdir(parents=True)
    shutil.copy(SCRIPT, repo / 'scripts' / 'gpu_check.sh')
    (repo / '.gpu-wheels').mkdir()
    (repo / '.gpu-wheels' / 'dill-0.4.1-py3-none-any.whl').write_bytes(b'stand-in')
    executable(tmp_path / 'bin' / 'python3', FAKE_PYTHON)
    (tmp_path / 'tmp').mkdir()
    return repo


def run_check(repo, *args, **env):
    tmp = repo.parent
    variables = {key: value for key, value in os.environ.items() if key not in ('PYTHON', 'OUT', 'BUDGET')}
    variables.update(PATH=f"{tmp / 'bin'}:{os.environ['PATH']}", CALLS=str(tmp / 'calls'), TMPDIR=str(tmp / 'tmp'),
                     **env)
    return subprocess.run(['bash', str(repo / 'scripts' / 'gpu_check.sh'), *args], cwd=tmp, env=variables,
                          capture_output=True, text=True, timeout=900)


def calls(repo):
    return (repo.parent / 'calls').read_text().splitlines()


def test_the_plan_lists_every_step_with_budgets_that_add_up_to_at_most_480_s(checkout):
    executable(checkout.parent / 'bin' / 'python3', '#!/usr/bin/env bash\nexit 9\n')   # the plan runs no python
    done = run_check(checkout, '--plan')
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    budgets = {line.split()[0]: int(line.split()[1]) for line in lines[:-1]}
    assert list(budgets) == ['setup'] + STEPS
    total = int(re.fullmatch(r'total: (\d+) s', lines[-1]).group(1))
    assert total == sum(budgets.values()) <= 480


def test_without_a_cuda_device_it_says_so_and_runs_nothing(checkout):
    done = run_check(checkout, str(checkout / 'report'), PYTHON=sys.executable)     # torch here is a CPU build
    assert done.returncode == 2
    assert 'Expected a CUDA device. Received: torch sees none here' in done.stderr
    assert not (checkout / 'report').exists()


def test_on_one_gpu_without_dill_it_installs_the_wheel_runs_every_step_and_reports_under_out(checkout):
    out = checkout.parent / 'out'
    done = run_check(checkout, OUT=str(out))
    assert done.returncode == 1, done.stdout + done.stderr          # the augment benchmark failed
    recorded = calls(checkout)
    assert all(call.startswith('python3 ') for call in recorded)    # no .venv: python3 from PATH
    install = recorded[0].split()
    assert install[1:4] == ['-m', 'pip', 'install'] and '--no-index' in install and install[-1] == 'dill'
    assert install[install.index('--find-links') + 1] == '.gpu-wheels'
    site = install[install.index('--target') + 1]
    assert Path(site).parent == checkout.parent / 'tmp' and not Path(site).exists()    # removed at the end
    steps = recorded[1:]
    assert steps[0].endswith('tests/parallel/test_one_gpu.py -k not deterministic')
    assert [call for call in steps if 'bench/' in call] == [
        'python3 bench/speed.py --no-cpu --networks cnn resnet18 --rounds 3 --iters 8',
        'python3 bench/replicas.py --reduction --no-cpu --steps 5 --blocks 7',
        'python3 bench/checkpoint_activations.py --device cuda --rounds 3 --steps 5',
        'python3 bench/augment.py --device cuda --repeats 4',
        'python3 bench/randomness.py --rounds 3 --steps 5']
    assert sorted(path.name for path in out.iterdir()) == sorted(['report.md'] + [f'{step}.txt' for step in STEPS])
    assert f'PYTHONPATH={checkout}:{site}' in (out / 'engines.txt').read_text()     # the checkout, then dill
    report = (out / 'report.md').read_text()
    assert '1 GPU(s), Fake H100 80GB; torch 2.11.0+cu130, CUDA 13.0; python3; budget 480 s' in report
    skipped = 'bench/pipeline.py: not run: its 2 ranks need a GPU each (NCCL refuses two ranks on one GPU'
    assert skipped in report and f'gpu_check: {skipped}' in done.stdout
    assert not any('bench/pipeline.py' in call for call in recorded)
    rows = dict(re.findall(r'^\| (\w+) \| ([^|]+) \| \d+ \| \d+ \|$', report, re.M))
    assert rows == {**dict.fromkeys(STEPS, 'pass'), 'bench_small': 'fail (exit 3)'}
    assert '## bench_small: fail (exit 3)' in report and 'output of bench/augment.py' in report


def test_a_venv_in_the_checkout_is_preferred_and_an_argument_names_the_report_folder(checkout):
    executable(checkout / '.venv' / 'bin' / 'python', FAKE_PYTHON)
    done = run_check(checkout, str(checkout.parent / 'mine'), OUT=str(checkout.parent / 'out'))
    assert done.returncode == 1
    assert all(call.startswith('python ') for call in calls(checkout))
    assert (checkout.parent / 'mine' / 'report.md').exists() and not (checkout.parent / 'out').exists()


def test_a_step_that_would_end_past_the_budget_is_skipped_and_reported_and_a_later_one_that_fits_runs(checkout):
    done = run_check(checkout, str(checkout.parent / 'out'), BUDGET='90')      # the stand-in's steps take no time
    assert done.returncode == 1
    report = (checkout.parent / 'out' / 'report.md').read_text()
    rows = dict(re.findall(r'^\| (\w+) \| ([^|]+) \| \d+ \| \d+ \|$', report, re.M))
    skipped = {step: rows.pop(step) for step in ('gpu_tests', 'bench_speed')}            # 95 and 100 s
    assert all(re.fullmatch(r'skipped: \d+ s left, it needs (95|100) s', row) for row in skipped.values())
    assert rows == {**{step: 'pass' for step in STEPS if step not in skipped}, 'bench_small': 'fail (exit 3)'}
    assert sorted(path.name for path in (checkout.parent / 'out').iterdir()) == sorted(
        ['report.md'] + [f'{step}.txt' for step in rows])


def test_a_missing_wheel_is_a_clear_error_before_any_step(checkout):
    (checkout / '.gpu-wheels' / 'dill-0.4.1-py3-none-any.whl').unlink()
    done = run_check(checkout, str(checkout.parent / 'out'))
    assert done.returncode == 2
    assert 'Expected wheels for dill in .gpu-wheels/' in done.stderr and 'bash scripts/gpu_wheels.sh' in done.stderr
    assert len(calls(checkout)) == 1 and not (checkout.parent / 'out').exists()
