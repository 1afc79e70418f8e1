"""``python -m flowpipe verify``'s verdict: a tolerance that is a finite number >= 0 (else exit 2), a default
tolerance from the dtype, the layout's pieces and the steps, ``--bitwise``, and, when a layout fails, the first
module whose activations or gradients differ — BatchNorm on 2 replicas (activations), a module whose backward
depends on its piece (gradients) — and nothing named on a clean layout."""
import re
import textwrap

import pytest
import torch

from flowpipe.__main__ import main
from flowpipe.execution.divergence import Recorder, first_divergence
from flowpipe.execution.verify import default_tolerance, diagnose, layout_pieces, load_pipeline

PIPELINE_FILE = '''
import numpy as np
import torch
from torch import nn
from flowpipe import B, Dataset, Pipeline, R
from tests.execution.planted_layout import Planted

def make(middle=None):
    rng = np.random.default_rng(0)
    data = Dataset(30, preloaded={'x': rng.normal(size=(30, 5)), 'y': rng.integers(0, 3, 30)})
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(5, 12), middle or nn.Tanh(), nn.Linear(12, 3))
    config = {'model': network, 'inputs/x/shape': (5,), 'inputs/y/classes': 3,
              'loss': {'name': 'ce', 'reduction': 'sum'}, 'optimizer': {'name': 'SGD', 'lr': 0.01}}
    return (Pipeline().init_model('net', config=config)
            .update(B.x, B.x + R('normal', 0, 0.1, size=B.x.shape))
            .train_model('net', x=B.x, y=B.y)) << data

def batch_norm():
    return make(nn.BatchNorm1d(12))

def planted():
    return make(nn.Sequential(nn.Tanh(), Planted()))
'''
NAMES = ('make', 'batch_norm', 'planted')
pytestmark = pytest.mark.filterwarnings('ignore:flowpipe. run.seed=.... does not set the initial weights')


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    """The pipeline file and, for each of its pipelines, the checkpoint folder of a run stopped after 2 batches."""
    folder = tmp_path_factory.mktemp('divergence')
    path = folder / 'train.py'
    path.write_text(textwrap.dedent(PIPELINE_FILE))
    for name in NAMES:
        batches = load_pipeline(f'{path}:{name}').gen_batch(10, n_epochs=2, shuffle=3, checkpoint=folder / name)
        for number, _ in enumerate(batches, start=1):
            if number == 2:
                break
        batches.close()
    return path, folder


def _verify(written, name, *options):
    path, folder = written
    return main(['verify', str(folder / name), '--pipeline', f'{path}:{name}', *options])


@pytest.mark.parametrize('text', ['nan', '-1', 'inf', '-inf', 'tight'])
def test_a_tolerance_that_is_not_a_finite_number_at_least_0_exits_2(written, capsys, text):
    with pytest.raises(SystemExit) as exit_:
        _verify(written, 'batch_norm', '--device', 'CPU:0x2', f'--tolerance={text}')
    assert exit_.value.code == 2
    assert f"Expected --tolerance as a finite number >= 0 (a relative deviation such as 1e-10). Received: " \
           f"{text!r}" in capsys.readouterr().err


def test_the_default_tolerance_is_8_eps_times_the_pieces_and_the_steps():
    assert layout_pieces(10, 1) == 1 and layout_pieces(10, 4) == 4 and layout_pieces(10, 1, ranks=2) == 2
    assert layout_pieces(10, 2, microbatch=2) == 6           # 5 items a replica: micro-batches of 2, 2 and 1
    assert layout_pieces(10, 2, ranks=2, microbatch=1) == 12  # 3 items a device (the most), one a piece
    assert default_tolerance('float64', 4, 3) == 8 * 2.0 ** -52 * 12
    assert default_tolerance('float32', 1, 1) == 8 * 2.0 ** -23


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_a_clean_layout_passes_the_default_tolerance(written, capsys, dtype):
    assert _verify(written, 'make', '--device', 'CPU:0x4', '--microbatch', '2', '--steps', '2', '--dtype', dtype) == 0
    out = capsys.readouterr().out
    eps = torch.finfo(getattr(torch, dtype)).eps
    tolerance = float(re.search(r'tolerance: (\S+) \(8 \* eps \* pieces \* steps', out).group(1))
    assert f'eps {eps:.3g} of {dtype}, 8 piece(s) a batch, 2 step(s)' in out
    assert tolerance == pytest.approx(8 * eps * 8 * 2, rel=1e-2)
    assert float(re.search(r'largest relative deviation: (\S+)', out).group(1)) <= tolerance
    assert 'first divergence' not in out


def test_batch_norm_on_2_replicas_fails_the_default_tolerance_and_is_named(written, capsys):
    assert _verify(written, 'batch_norm', '--device', 'CPU:0x2', '--steps', '2') == 1
    out = capsys.readouterr().out
    assert "first divergence: the activations of module '1' (BatchNorm1d) in forward 1 of Sequential" in out


def test_a_backward_that_depends_on_the_piece_is_named_by_its_gradients(written, capsys):
    assert _verify(written, 'planted', '--device', 'CPU:0x2', '--dtype', 'float32', '--trusted') == 1
    out = capsys.readouterr().out
    assert "first divergence: the gradients of module '1.1' (Planted) in forward 1 of Sequential" in out


def test_bitwise_exits_1_unless_the_replay_has_the_same_bits(written, capsys):
    assert _verify(written, 'make', '--device', 'cpu', '--steps', '2', '--bitwise') == 0
    assert 'bit-identical: yes (--bitwise)' in capsys.readouterr().out
    assert _verify(written, 'batch_norm', '--device', 'CPU:0x2', '--bitwise', '--tolerance', '1') == 1
    out = capsys.readouterr().out          # --bitwise asks for the same bits whatever the tolerance
    assert 'bit-identical: no (--bitwise)' in out       # the first module whose bits differ: on this machine's BLAS
    assert re.search(r"first divergence: the activations of module '[01]' \((Linear|BatchNorm1d)\)", out), out


def test_a_clean_layout_has_no_divergence_beyond_its_tolerance(written):
    path, folder = written
    tolerance = default_tolerance('float64', 6, 2)
    assert diagnose(str(folder / 'make'), f'{path}:make', 2, 'CPU:0x2', 2, tolerance=tolerance) is None
    found = diagnose(str(folder / 'batch_norm'), f'{path}:batch_norm', 2, 'CPU:0x2', tolerance=tolerance)
    assert (found.what, found.module, found.kind, found.forward) == ('activations', '1', 'BatchNorm1d', 1)


def test_the_recorder_places_pieces_on_their_items_and_leaves_no_hook():
    torch.manual_seed(0)
    network = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double()
    x = torch.randn(6, 3, dtype=torch.double)
    with Recorder() as whole:
        network(x).sum().backward()
    with Recorder() as pieces:
        for part in (x[4:], x[:1], x[1:4]):                  # any order, any sizes
            network(part).sum().backward()
    assert len(whole.calls) == 1 and len(pieces.calls) == 3
    assert [key[0] for key in whole.calls[0].finished] == ['0', '1', '2', '']
    assert first_divergence(whole.calls, pieces.calls, 1e-12) is None
    pieces.calls[2].outputs[('1', 0, 'ReLU')][0, 0] += 1.0   # an item of the last piece: the first batch row 1
    found = first_divergence(whole.calls, pieces.calls, 1e-12)
    assert (found.what, found.module, found.kind) == ('activations', '1', 'ReLU')
    network(x)
    assert len(pieces.calls) == 3                             # the hooks are gone


@pytest.mark.slow
def test_on_2_ranks_a_clean_layout_passes_and_batch_norm_is_named(written, capsys):
    assert _verify(written, 'make', '--device', 'cpu', '--ranks', '2', '--steps', '2') == 0
    assert 'first divergence' not in capsys.readouterr().out
    assert _verify(written, 'batch_norm', '--device', 'cpu', '--ranks', '2') == 1
    out = capsys.readouterr().out          # each rank's pieces placed on their items of the global batch
    assert "first divergence: the activations of module '1' (BatchNorm1d) in forward 1 of Sequential" in out
