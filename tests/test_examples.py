"""The ports in ``examples/`` run on small settings and end with ``accuracy=<share> steps=<optimizer steps>``."""
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAST_LINE = re.compile(r'accuracy=(0\.\d+|1\.0+) steps=(\d+)')


def run_example(name: str, *args: str) -> tuple[float, int, str]:
    """Run ``examples/<name>`` with this checkout's flowpipe; its test accuracy, optimizer steps and last line."""
    env = {**os.environ, 'PYTHONPATH': f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, str(ROOT / 'examples' / name), *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    match = LAST_LINE.fullmatch(last)
    assert match, f"unexpected last line {last!r}"
    return float(match[1]), int(match[2]), last


def test_pytorch_mnist_takes_dataloaders_steps_and_learns():
    # 330 items in batches of 64 are 6 batches per epoch (the last one of 10 items), as DataLoader makes them:
    # 12 steps in 2 epochs, where one stream cut across the epochs would take ceil(660 / 64) = 11
    accuracy, steps, _ = run_example('pytorch_mnist.py', '--epochs', '2', '--subset', '330', '--seed', '3')
    assert steps == 2 * math.ceil(330 / 64) == 12
    assert accuracy > 0.3         # chance is 0.1 over ten digits


def test_keras_mlp_learns_and_gives_the_same_numbers_on_every_layout():
    # 400 training items: 320 trained on in batches of 256 (2 per epoch), 80 validated; 400 test items
    lines = {}
    for layout in ('single', 'data', 'model'):
        accuracy, steps, lines[layout] = run_example('keras_mnist_mlp.py', '--epochs', '3', '--subset', '400',
                                                     '--layout', layout)
        assert steps == 3 * math.ceil(320 / 256) == 6
        assert accuracy > 0.2         # chance is 0.1
    assert lines['data'] == lines['single'] == lines['model']
