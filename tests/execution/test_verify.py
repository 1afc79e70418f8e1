"""``python -m flowpipe verify CHECKPOINT --pipeline FILE.py:NAME --steps k --device ... --dtype ...``: replays the
next steps of a run checkpoint in one process and on another layout and prints the largest relative deviation of
the parameters; bad arguments get a clear error."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from flowpipe.__main__ import main
from flowpipe.execution.verify import load_pipeline, replay, verify

pytestmark = pytest.mark.usefixtures('default_dtype')
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PIPELINE_FILE = '''
import numpy as np
import torch
from torch import nn
from flowpipe import B, Dataset, P, Pipeline, R, V

def make(batch_norm=False, noise=None):
    rng = np.random.default_rng(0)
    data = Dataset(40, preloaded={'x': rng.normal(size=(40, 6)), 'y': rng.integers(0, 3, 40)})
    torch.manual_seed(0)
    middle = nn.BatchNorm1d(16) if batch_norm else nn.Tanh()
    network = nn.Sequential(nn.Linear(6, 16), middle, nn.Linear(16, 3)).double()
    config = {'model': network, 'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'loss': 'ce',
              'device': 'GPU:*' if torch.cuda.is_available() else 'cpu',
              'optimizer': {'name': 'Adam', 'lr': 0.01}}
    return (Pipeline().init_variable('loss', []).init_model('net', config=config)
            .update(B.x, B.x + (P(R('normal', 0, 0.1, size=6)) if noise is None else noise))   # drawn per item
            .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << data

def batch_norm():
    return make(batch_norm=True)

def batch_noise():      # one array drawn for the batch: one row per item, on every layout
    return make(noise=R('normal', 0, 0.1, size=B.x.shape))

if __name__ == '__main__':
    raise SystemExit('the verify command must not run the file as a script')
'''
RUN = {'n_epochs': 3, 'shuffle': 5}
STOP = 4


@pytest.fixture
def written(tmp_path):
    """The pipeline file, and the checkpoint folder of its run stopped after ``STOP`` batches."""
    path = tmp_path / 'train.py'
    path.write_text(textwrap.dedent(PIPELINE_FILE))
    for name in ('make', 'batch_norm', 'batch_noise'):
        batches = load_pipeline(f'{path}:{name}').gen_batch(8, **RUN, checkpoint=tmp_path / name)
        for number, _ in enumerate(batches, start=1):
            if number == STOP:
                break
        batches.close()
    return path, tmp_path


def test_the_replay_continues_the_run_and_a_layout_of_replicas_and_micro_batches_is_exact(written):
    path, folder = written
    whole = load_pipeline(f'{path}:make')
    batches = whole.gen_batch(8, **RUN)
    for number, _ in enumerate(batches, start=1):
        if number == STOP + 3:
            break
    batches.close()
    checkpoint = str(folder / 'make' / f'checkpoint-{STOP:09d}.flowpipe')
    one = {'device': 'cpu', 'microbatch': None}
    params, steps = replay(checkpoint, f'{path}:make', 3, one, 'float64')
    assert steps == 3
    assert all(torch.equal(a, b.to(torch.float64)) for a, b in zip(params['net'], whole.m('net').model.parameters()))
    result = verify(str(folder / 'make'), f'{path}:make', 3, 'CPU:0x4', 3, 'float64')
    assert result['steps'] == 3 and result['path'] == checkpoint
    assert 0 <= result['deviations']['net'] < 1e-10


@pytest.mark.filterwarnings('ignore::UserWarning')
def test_a_layout_that_changes_the_result_shows_in_the_deviation(written):
    path, folder = written        # BatchNorm normalizes each replica's shard with its own statistics
    result = verify(str(folder / 'batch_norm'), f'{path}:batch_norm', 2, ['CPU:0', 'CPU:1'], None, 'float64')
    assert result['deviations']['net'] > 1e-6


def test_the_command_prints_the_deviation_and_exits_0(written):
    path, folder = written
    command = [sys.executable, '-m', 'flowpipe', 'verify', str(folder / 'make'), '--pipeline', f'{path}:make',
               '--steps', '2', '--device', 'CPU:0x4', '--microbatch', '3', '--dtype', 'float64']
    done = subprocess.run(command, env={**os.environ, 'PYTHONPATH': ROOT}, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "replayed 2 step(s)" in done.stdout and "model 'net': largest relative deviation" in done.stdout
    assert float(re.search(r'largest relative deviation: (\S+)', done.stdout).group(1)) < 1e-10


@pytest.mark.parametrize('option, message', [
    (['--device', 'GPU:7'], "Expected an available CUDA device. Received: 'GPU:7'"),
    (['--device', 'CPU:0x4', '--dtype', 'float16'], "Expected --dtype float32 or float64. Received: 'float16'"),
    (['--device', 'CPU:0x4', '--steps', '0'], "Expected --steps as an int >= 1. Received: '0'"),
])
def test_a_bad_layout_or_dtype_is_a_clear_error(written, capsys, option, message):
    path, folder = written
    argv = ['verify', str(folder / 'make'), '--pipeline', f'{path}:make', *option]
    try:
        status = main(argv)
    except SystemExit as exit_:         # argparse's own errors exit with status 2
        status = exit_.code
    assert status == 2 and message in capsys.readouterr().err


def test_a_missing_pipeline_name_or_checkpoint_is_a_clear_error(written, capsys):
    path, folder = written
    assert main(['verify', str(folder / 'make'), '--pipeline', f'{path}:nothing', '--device', 'cpu']) == 2
    assert f"Expected {path} to define 'nothing'" in capsys.readouterr().err
    assert main(['verify', str(folder / 'absent'), '--pipeline', f'{path}:make', '--device', 'cpu']) == 2
    assert 'Expected a run checkpoint file or a folder holding one' in capsys.readouterr().err


@pytest.mark.filterwarnings('ignore::UserWarning')
def test_a_deviation_above_the_tolerance_exits_1(written, capsys):
    path, folder = written
    argv = ['verify', str(folder / 'batch_norm'), '--pipeline', f'{path}:batch_norm', '--device', 'CPU:0,CPU:1',
            '--tolerance', '1e-12']
    assert main(argv) == 1
    assert float(re.search(r'largest relative deviation: (\S+)', capsys.readouterr().out).group(1)) > 1e-12


@pytest.mark.slow
def test_a_layout_of_2_ranks_is_exact(written, capsys):
    path, folder = written
    result = verify(str(folder / 'make'), f'{path}:make', 3, 'cpu', None, 'float64', ranks=2)
    assert result['steps'] == 3 and 0 <= result['deviations']['net'] < 1e-10
    argv = ['verify', str(folder / 'make'), '--pipeline', f'{path}:make', '--device', 'CPU:0x2', '--ranks', '2']
    assert main(argv) == 2
    assert "Expected one device per rank with --ranks 2. Received: --device 'CPU:0x2'" in capsys.readouterr().err
    noisy = verify(str(folder / 'batch_noise'), f'{path}:batch_noise', 3, 'cpu', None, 'float64', ranks=2)
    assert 0 <= noisy['deviations']['net'] < 1e-10


@pytest.mark.slow
def test_a_layout_of_2_pipeline_stages_is_exact(written, capsys):
    path, folder = written
    result = verify(str(folder / 'make'), f'{path}:make', 3, 'cpu', 2, 'float64', ranks=2, stages=2)
    assert result['steps'] == 3 and 0 <= result['deviations']['net'] < 1e-10
    argv = ['verify', str(folder / 'make'), '--pipeline', f'{path}:make', '--device', 'cpu', '--ranks', '2',
            '--stages', '2', '--microbatch', '3', '--tolerance', '1e-10']
    assert main(argv) == 0
    assert "1 pipeline(s) of 2 stages, 2 ranks, each device='cpu', microbatch=3" in capsys.readouterr().out
    assert main([*argv[:-6], '--ranks', '3', '--stages', '2']) == 2
    assert 'Expected --ranks a multiple of --stages' in capsys.readouterr().err


OWN_CLASS_FILE = '''
import numpy as np
from flowpipe import B, Dataset, Pipeline, V
from flowpipe.models.torch import MLP

class Tally:
    def __init__(self):
        self.seen = 0

def pipeline():
    rng = np.random.default_rng(0)
    data = Dataset(16, preloaded={'x': rng.normal(size=(16, 4)), 'y': rng.integers(0, 3, 16)})
    config = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,)}
    return (Pipeline().init_variable('tally', Tally()).init_model('net', MLP, config=config)
            .train_model('net', x=B.x, y=B.y)) << data
'''


def test_a_checkpoint_holding_the_user_s_objects_is_verified_only_with_trusted(tmp_path, capsys):
    path = tmp_path / 'own.py'
    path.write_text(OWN_CLASS_FILE)
    batches = load_pipeline(f'{path}:pipeline').gen_batch(4, n_epochs=2, checkpoint=tmp_path / 'ckpt')
    for number, _ in enumerate(batches, start=1):
        if number == 2:
            break
    batches.close()
    arguments = ['verify', str(tmp_path / 'ckpt'), '--pipeline', f'{path}:pipeline', '--device', 'CPU:0x2']
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert re.search(r"code stored in the file itself.*Here: add --trusted", error), error
    assert main([*arguments, '--trusted']) == 0
    assert 'largest relative deviation' in capsys.readouterr().out
