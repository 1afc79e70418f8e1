"""scripts/gpu_check.sh: refuses to run without a CUDA device; with one, runs the gpu tests and every benchmark's
GPU arm, keeps each output and writes a summary with each command's exit status."""
import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / 'scripts' / 'gpu_check.sh'

# Stands in for a CUDA machine's python: answers the script's torch questions, records every other command, and
# fails the augment benchmark.
FAKE_PYTHON = r'''#!/usr/bin/env bash
if [ "$1" = "-c" ]; then
    case "$2" in *device_count*) echo 2;; *) echo "torch 2.13.0 CUDA 12.8 - Fake GPU";; esac
    exit 0
fi
echo "$*" >> "$CALLS"
echo "output of $*"
case "$*" in *bench/augment.py*) exit 3;; esac
exit 0
'''


def _run(tmp_path, python):
    env = {**os.environ, 'PYTHON': str(python), 'CALLS': str(tmp_path / 'calls')}
    return subprocess.run(['bash', str(SCRIPT), str(tmp_path / 'report')], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


def test_without_a_cuda_device_it_says_so_and_runs_nothing(tmp_path):
    done = _run(tmp_path, sys.executable)           # torch here is a CPU build
    assert done.returncode == 2
    assert 'Expected a CUDA device. Received: torch sees none here' in done.stderr
    assert not (tmp_path / 'report').exists()


def test_with_gpus_it_runs_every_gpu_command_and_reports_each_status(tmp_path):
    python = tmp_path / 'python'
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    done = _run(tmp_path, python)
    assert done.returncode == 1, done.stdout + done.stderr       # one command failed
    calls = (tmp_path / 'calls').read_text().splitlines()
    assert calls[0] == '-m pytest -m gpu -q -rA -p no:cacheprovider tests'
    assert [call.split()[0] for call in calls[1:]] == ['bench/speed.py', 'bench/augment.py', 'bench/replicas.py',
                                                      'bench/replicas.py', 'bench/distributed.py', 'bench/sharding.py']
    assert 'bench/augment.py --device cuda' in calls
    report = (tmp_path / 'report' / 'report.md').read_text()
    assert '2 GPU(s), torch 2.13.0 CUDA 12.8 - Fake GPU' in report
    assert '## augment: exit 3' in report and '## speed: exit 0' in report and '## tests: exit 0' in report
    assert (tmp_path / 'report' / 'distributed.txt').read_text() == 'output of bench/distributed.py --rounds 2\n'
