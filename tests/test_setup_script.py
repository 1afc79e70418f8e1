"""scripts/setup.sh: a line per step, pip's own output only when a step fails, nothing to do the second time.

The script runs in a copy of the repository's layout against stand-ins for ``python3``, the venv's python and
pip, so the test installs nothing and needs no network: the stand-ins record what they are asked to install and
chatter as pip does.
"""
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The venv's python: imports succeed once pip has "installed" them (marker files); pip prints pip-like chatter.
VENV_PYTHON = r'''#!/usr/bin/env bash
state="$(dirname "$0")/../state"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    echo "pip $*" >> "$state/calls"
    echo "Collecting torch"; echo "  Downloading torch-2.13.0-cp311.whl (200 MB)" >&2
    if [ -n "${FAKE_PIP_FAILS:-}" ]; then echo "ERROR: No matching distribution found for $FAKE_PIP_FAILS"; exit 1; fi
    case "$*" in *torch==*) touch "$state/torch";; *-e*) touch "$state/flowpipe";; esac
    exit 0
fi
case "$2" in
    "import torch") [ -e "$state/torch" ];;
    *print*) PYTHONPATH="$state/stubs" "$REAL_PYTHON" -c "$2";;    # the script's own line, over stub modules
    *) [ -e "$state/flowpipe" ];;
esac
'''

PYTHON3 = r'''#!/usr/bin/env bash
# python3 -m venv DIR: make DIR/bin/python the stand-in above
mkdir -p "$3/bin" "$3/state/stubs"
cp "$(dirname "$0")/venv-python" "$3/bin/python"
touch "$3/state/stubs/flowpipe.py"
echo "__version__ = '2.13.0+cpu'" > "$3/state/stubs/torch.py"
echo "venv $3" >> "$3/state/calls"
'''


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / 'scripts').mkdir()
    shutil.copy(ROOT / 'scripts' / 'setup.sh', tmp_path / 'scripts' / 'setup.sh')
    tools = tmp_path / 'tools'
    tools.mkdir()
    for name, text in (('venv-python', VENV_PYTHON), ('python3', PYTHON3), ('nvidia-smi', '#!/bin/sh\nexit 1\n')):
        (tools / name).write_text(text)
        (tools / name).chmod(stat.S_IRWXU)
    return tmp_path


def _setup(checkout, **env):
    environ = {**os.environ, 'PATH': f"{checkout / 'tools'}{os.pathsep}/usr/bin{os.pathsep}/bin",
               'REAL_PYTHON': sys.executable, **env}
    return subprocess.run(['bash', str(checkout / 'scripts' / 'setup.sh')], capture_output=True, text=True,
                          env=environ, timeout=900)


def test_a_first_run_says_each_step_and_hides_pip(checkout):
    done = _setup(checkout)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(' ')[1] for line in lines] == ['creating', 'installing', 'installing', 'ready:'], lines
    assert 'the CPU build' in lines[1] and 'flowpipe' in lines[2] and 'test tools' in lines[2]
    assert lines[3] == 'setup: ready: flowpipe in .venv (torch 2.13.0+cpu)'
    assert 'Collecting' not in done.stdout + done.stderr and 'Downloading' not in done.stdout + done.stderr
    calls = (checkout / '.venv' / 'state' / 'calls').read_text()
    assert 'torch==2.13.0+cpu' in calls and '-e .[test]' in calls


def test_a_second_run_installs_nothing(checkout):
    assert _setup(checkout).returncode == 0
    calls = (checkout / '.venv' / 'state' / 'calls').read_text()
    again = _setup(checkout)
    assert again.returncode == 0 and again.stderr == ''
    assert len(again.stdout.splitlines()) == 1 and 'ready' in again.stdout
    assert (checkout / '.venv' / 'state' / 'calls').read_text() == calls


def test_a_failing_step_shows_pip_output_and_names_the_step(checkout):
    done = _setup(checkout, FAKE_PIP_FAILS='torch==2.13.0')
    assert done.returncode == 1
    assert 'ERROR: No matching distribution found for torch==2.13.0' in done.stderr
    assert 'setup: failed while installing torch' in done.stderr
    assert 'ready' not in done.stdout
