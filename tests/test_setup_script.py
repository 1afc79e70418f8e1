"""scripts/setup.sh: a line per step, pip's own output only when a step fails, nothing to do the second time; the
demo installs flowpipe's own dependencies, the test tools come with ``make test``.

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
    case "$*" in
        *torch==*) touch "$state/torch";;
        *".[test]"*) touch "$state/flowpipe" "$state/test";;
        *-e*) touch "$state/flowpipe";;
    esac
    exit 0
fi
case "$2" in
    "import torch") [ -e "$state/torch" ];;
    *pytest*) [ -e "$state/test" ];;
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


def _setup(checkout, *args, **env):
    environ = {**os.environ, 'PATH': f"{checkout / 'tools'}{os.pathsep}/usr/bin{os.pathsep}/bin",
               'REAL_PYTHON': sys.executable, **env}
    return subprocess.run(['bash', str(checkout / 'scripts' / 'setup.sh'), *args], capture_output=True, text=True,
                          env=environ, timeout=900)


def _calls(checkout):
    return (checkout / '.venv' / 'state' / 'calls').read_text()


@pytest.mark.parametrize('mode', [[], ['test']], ids=['demo', 'test'])
def test_a_first_run_says_each_step_and_hides_pip(checkout, mode):
    done = _setup(checkout, *mode)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(' ')[1] for line in lines] == ['creating', 'installing', 'installing', 'ready:'], lines
    assert 'the CPU build' in lines[1] and 'flowpipe' in lines[2]
    assert lines[3] == 'setup: ready: flowpipe in .venv (torch 2.13.0+cpu)'
    assert 'Collecting' not in done.stdout + done.stderr and 'Downloading' not in done.stdout + done.stderr
    assert 'torch==2.13.0+cpu' in _calls(checkout)
    assert ('-e .[test]' in _calls(checkout)) == bool(mode) and ('test tools' in lines[2]) == bool(mode)


def test_the_demo_installs_no_test_tools_and_the_tests_add_only_them(checkout):
    assert _setup(checkout, 'demo').returncode == 0
    assert '[test]' not in _calls(checkout) and 'pip install -q --disable-pip-version-check -e .' in _calls(checkout)
    before = _calls(checkout)
    done = _setup(checkout, 'test')
    assert done.returncode == 0 and [line.split(' ')[1] for line in done.stdout.splitlines()] == ['installing',
                                                                                               'ready:']
    added = _calls(checkout)[len(before):]
    assert added.splitlines() == ['pip -m pip install -q --disable-pip-version-check -e .[test]']
    assert _setup(checkout, 'demo').stdout.splitlines() == ['setup: ready: flowpipe in .venv (torch 2.13.0+cpu)']


def test_make_demo_sets_up_for_the_demo_and_make_test_for_the_tests():
    rules = (ROOT / 'Makefile').read_text(encoding='utf-8')
    assert 'setup:\n\tbash scripts/setup.sh demo\n' in rules and 'demo: setup\n' in rules
    assert 'test:\n\tbash scripts/setup.sh test\n\t$(PY) -m pytest -q\n' in rules
    assert (ROOT / '.ci' / 'run').read_text(encoding='utf-8').rstrip().endswith('make test')


def test_an_unknown_mode_is_refused(checkout):
    done = _setup(checkout, 'tests')
    assert done.returncode == 2 and "Expected 'demo' or 'test'. Received: tests." in done.stderr
    assert not (checkout / '.venv').exists()


@pytest.mark.parametrize('mode', ['demo', 'test'])
def test_a_second_run_installs_nothing(checkout, mode):
    assert _setup(checkout, mode).returncode == 0
    calls = _calls(checkout)
    again = _setup(checkout, mode)
    assert again.returncode == 0 and again.stderr == ''
    assert len(again.stdout.splitlines()) == 1 and 'ready' in again.stdout
    assert _calls(checkout) == calls


def test_a_failing_step_shows_pip_output_and_names_the_step(checkout):
    done = _setup(checkout, FAKE_PIP_FAILS='torch==2.13.0')
    assert done.returncode == 1
    assert 'ERROR: No matching distribution found for torch==2.13.0' in done.stderr
    assert 'setup: failed while installing torch' in done.stderr
    assert 'ready' not in done.stdout
