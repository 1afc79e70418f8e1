"""A run counted in steps (``Validate(..., every=N, steps=True)``): validation, early stopping, best files and
loggers act every N batches (and at step 0 with ``at_start``), with no epochs; ``estimate=`` validates on a few
batches drawn from the step; an interrupted run resumes to the same rows and files."""
import csv
import os

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, Checkpoint, I, Pipeline, V
from flowpipe.callbacks import CSVLogger, EarlyStopping, ModelCheckpoint, Validate
from flowpipe.data import TokenWindows
from flowpipe.models.torch import TorchModel

VOCAB, BLOCK = 9, 5
STOP = {'at': None}


class Stopped(Exception):
    pass


def _stop(number):
    if STOP['at'] is not None and number == STOP['at']:
        raise Stopped(number)


def _tokens(seed):
    return np.random.default_rng(seed).integers(0, VOCAB, size=300).astype(np.uint16)


def _pipelines():
    config = {'model': lambda: nn.Sequential(nn.Embedding(VOCAB, 4), nn.Linear(4, VOCAB)),
              'inputs/inputs/shape': (BLOCK,), 'inputs/targets/classes': VOCAB, 'initial_block/inputs': 'inputs',
              'loss': 'ce', 'optimizer': {'name': 'Adam', 'lr': 0.05}}
    train = (Pipeline().init_model('lm', TorchModel, 'static', config).call(_stop, I('c'))   # built for step 0
             .train_model('lm', inputs=B.inputs, targets=B.targets)) << TokenWindows(_tokens(0), BLOCK)
    val = (Pipeline().import_model('lm', train).init_variable('losses', []).init_variable('seen', [])
           .update(V('seen', mode='a'), B.inputs)
           .predict_model('lm', inputs=B.inputs, targets=B.targets, fetches='loss', save_to=V('losses', mode='a'))
           ) << TokenWindows(_tokens(1), BLOCK)
    return train, val


def _run(folder, stop=None, patience=50):
    torch.manual_seed(0)
    train, val = _pipelines()
    seen = []

    def loss(pipeline):
        seen.append(np.concatenate(pipeline.v('seen')))
        return float(np.mean(pipeline.v('losses')))
    early = EarlyStopping('val/loss', patience=patience, min_delta=1e-9)
    best = ModelCheckpoint(os.path.join(folder, 'best'), monitor='val/loss', save_top_k=2)
    callbacks = [Validate(val, every=4, batch_size=3, steps=True, at_start=True, estimate=2, metrics={'loss': loss}),
                 early, best, CSVLogger(os.path.join(folder, 'logs'))]
    STOP['at'] = stop
    try:
        train.run(6, n_iters=14, seed=3, callbacks=callbacks, checkpoint=Checkpoint(os.path.join(folder, 'ck')),
                  resume=os.path.isdir(os.path.join(folder, 'ck')))
    except Stopped:
        pass
    finally:
        STOP['at'] = None
    with open(os.path.join(folder, 'logs', 'metrics.csv')) as file:
        rows = list(csv.DictReader(file))
    return {'rows': rows, 'early': early, 'best': best, 'seen': seen, 'files': sorted(os.listdir(best.folder)),
            'params': [p.detach().numpy().copy() for p in train.m('lm').model.parameters()]}


def test_validation_decisions_and_logs_come_every_n_steps_from_step_0(tmp_path):
    result = _run(tmp_path)
    assert [int(row['step']) for row in result['rows']] == [0, 4, 8, 12]
    assert float(result['rows'][0]['lr']) == 0.05              # the static model's, before its first step
    assert np.isnan(float(result['rows'][0]['train/loss'])) and all(
        np.isfinite(float(row['train/loss'])) for row in result['rows'][1:])
    assert [name for name in result['files'] if name.endswith('.model')] == sorted(
        f'step-{int(row["step"]):06d}.model' for row in sorted(
            result['rows'], key=lambda row: float(row['val/loss']))[:2])
    best = TorchModel.from_file(result['best'].best_path)
    assert result['best'].best_score == min(float(row['val/loss']) for row in result['rows'])
    best.close()
    # estimate=2 batches of 3: 6 windows each time, new at each step, the same in another run
    assert [len(seen) for seen in result['seen']] == [6] * 4
    assert not np.array_equal(result['seen'][0], result['seen'][1])
    again = _run(tmp_path / 'again')
    for a, b in zip(result['seen'], again['seen']):
        np.testing.assert_array_equal(a, b)


def test_early_stopping_stops_at_a_step_event(tmp_path):
    result = _run(tmp_path, patience=1)
    stopped = result['early'].stopped_epoch
    assert stopped is not None and stopped % 4 == 0
    assert int(result['rows'][-1]['step']) == stopped


def test_an_interrupted_run_counted_in_steps_resumes_to_the_same_rows(tmp_path):
    whole = _run(tmp_path / 'whole')
    _run(tmp_path / 'cut', stop=6)
    resumed = _run(tmp_path / 'cut')
    assert [{k: v for k, v in row.items() if k != 'run'} for row in resumed['rows']] == [
        {k: v for k, v in row.items() if k != 'run'} for row in whole['rows']]
    assert resumed['files'] == whole['files']
    for a, b in zip(resumed['params'], whole['params']):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('kwargs, match', [({'steps': True}, 'every=N'), ({'every': 3, 'at_start': True}, 'at_start'),
                                           ({'estimate': 0}, 'estimate'), ({'prefix': 'train'}, 'prefix')])
def test_bad_step_options_name_the_fix(kwargs, match):
    _, val = _pipelines()
    with pytest.raises(ValueError, match=match):
        Validate(val, **kwargs)


def test_step_counted_validations_must_agree_on_their_period():
    train, val = _pipelines()
    callbacks = [Validate(val, every=4, batch_size=3, steps=True, metrics={'n': len}),
                 Validate(val, every=5, batch_size=3, steps=True, metrics={'n': len}, prefix='other')]
    with pytest.raises(ValueError, match='same every'):
        train.run(6, n_iters=2, callbacks=callbacks)
