"""A run with callbacks interrupted and resumed from its checkpoint ends as the uninterrupted one: the same stop
epoch, learning rates, logged rows and best files (replicas, micro-batches, with and without prefetch)."""
import os

import numpy as np
import pytest
import torch

from flowpipe import B, Checkpoint, Pipeline, V
from flowpipe.callbacks import CSVLogger, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, Validate
from flowpipe.models.torch import TorchModel

from ..execution import checkpoint_cases as cases

RUN = {'batch_size': cases.BATCH, 'n_epochs': 12, 'shuffle': 5}


def _callbacks(train, folder):
    val = (Pipeline().import_model('net', train).init_variable('losses', [])
           .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << train.dataset
    early = EarlyStopping('val/loss', patience=2, min_delta=0.01)
    best = ModelCheckpoint(os.path.join(folder, 'best'), monitor='val/loss', save_top_k=2)
    return early, best, [Validate(val, batch_size=20, metrics={'loss': lambda p: float(np.mean(p.v('losses')))}),
                         early, best, ReduceLROnPlateau('net', factor=0.5, patience=0),
                         CSVLogger(os.path.join(folder, 'logs'))]


def _ending(train, early, best, folder):
    files = sorted(os.listdir(os.path.join(folder, 'best')))
    weights = []
    for name in files:
        model = TorchModel.from_file(os.path.join(folder, 'best', name))
        weights.append([p.detach().clone() for p in model.model.parameters()])
        model.close()
    with open(os.path.join(folder, 'logs', 'metrics.csv')) as file:
        rows = file.read()
    lrs = [group['lr'] for group in train.m('net').optimizer.param_groups]
    return {'stop': early.stopped_epoch, 'files': files, 'weights': weights, 'rows': rows, 'lrs': lrs,
            'score': best.best_score, 'outcome': cases.outcome(train)}


@pytest.fixture(autouse=True)
def _no_trigger():
    yield
    cases.TRIGGER.update(at=None, error=None, where='first')


@pytest.mark.parametrize('prefetch', [0, 4])
def test_resumed_run_with_callbacks_ends_as_the_uninterrupted_one(tmp_path, prefetch):
    train = cases.pipeline()
    early, best, callbacks = _callbacks(train, tmp_path / 'whole')
    train.run(**RUN, prefetch=prefetch, callbacks=callbacks)
    whole = _ending(train, early, best, tmp_path / 'whole')
    assert whole["stop"] is not None and whole["stop"] > 3      # the crash below falls before the stop

    cases.TRIGGER.update(at=20, error=cases.Crash(), where='first')   # after epoch 3 ends, 2 batches past a write
    spec = Checkpoint(tmp_path / 'checkpoints', every=3)
    first = cases.pipeline()
    with pytest.raises(cases.Crash):
        first.run(**RUN, prefetch=prefetch, checkpoint=spec, callbacks=_callbacks(first, tmp_path / 'parts')[2])
    first.m('net').close()
    cases.TRIGGER.update(at=None)
    again = cases.pipeline()
    early, best, callbacks = _callbacks(again, tmp_path / 'parts')
    again.run(**RUN, prefetch=prefetch, checkpoint=spec, resume=True, callbacks=callbacks)
    resumed = _ending(again, early, best, tmp_path / 'parts')

    for key in ('stop', 'files', 'rows', 'lrs', 'score'):
        assert resumed[key] == whole[key], key
    assert all(torch.equal(a, b) for one, other in zip(resumed['weights'], whole['weights'])
               for a, b in zip(one, other))
    cases.assert_same(resumed['outcome'], whole['outcome'])
