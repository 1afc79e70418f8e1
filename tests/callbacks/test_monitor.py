"""A monitored value missing at an epoch end: skipped with one warning when a callback logs it later, else named."""
import csv
import os
import warnings

import numpy as np
import pytest

from flowpipe import B, Pipeline, V
from flowpipe.callbacks import CSVLogger, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, Validate

from ..execution import checkpoint_cases as cases
from .fake_run import FakeRun, one_model_pipeline


def _validate(train, every):
    val = (Pipeline().import_model('net', train).init_variable('losses', [])
           .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << train.dataset
    return Validate(val, every=every, batch_size=20, metrics={'loss': lambda p: float(np.mean(p.v('losses')))})


def test_validate_every_more_batches_than_an_epoch_skips_the_epochs_before_its_first_value(tmp_path):
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)       # 5 batches an epoch, 3 epochs
    early = EarlyStopping(monitor='val/loss', patience=5)
    best = ModelCheckpoint(tmp_path / 'best', monitor='val/loss', save_top_k=3)
    plateau = ReduceLROnPlateau('net', monitor='val/loss', patience=0)
    with pytest.warns(UserWarning) as caught:
        train.run(**cases.RUN, callbacks=[_validate(train, every=7), early, best, plateau, CSVLogger(tmp_path)])
    messages = [str(warning.message) for warning in caught if 'skips epoch' in str(warning.message)]
    assert [message.split(' skips')[0] for message in messages] == ['EarlyStopping', 'ModelCheckpoint',
                                                                     'ReduceLROnPlateau']
    assert all("skips epoch 0: monitor='val/loss'" in message for message in messages)    # once each, epoch 0 only
    with open(tmp_path / 'metrics.csv') as file:
        rows = list(csv.DictReader(file))
    assert [row['val/loss'] == '' for row in rows] == [True, False, False]
    assert sorted(epoch for _, epoch, _ in best.kept) == [1, 2]          # epoch 0 had nothing to rank
    assert not os.path.exists(tmp_path / 'best' / 'epoch-0000.model')
    train.m('net').close()


def test_skipped_epochs_change_no_count():
    run = FakeRun(one_model_pipeline(lr=1.0))
    run.callbacks = [Validate(Pipeline(), every=100, metrics={'loss': len})]
    early, plateau = EarlyStopping(patience=0), ReduceLROnPlateau('net', patience=0, factor=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for epoch in range(3):                          # three epoch ends before the first validation
            run.logs = {'epoch': epoch, 'train/loss': 1.0}
            early.on_epoch_end(run, epoch)
            plateau.on_epoch_end(run, epoch)
    assert len(caught) == 2                             # one per callback, not one per epoch
    assert (early.wait, early.stopped_epoch, run.stopped) == (0, None, False)
    assert plateau.bad_epochs == 0 and run.pipeline.m('net').optimizer.param_groups[0]['lr'] == 1.0


def test_a_monitor_no_callback_logs_is_still_an_error():
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    with pytest.raises(KeyError, match="monitor='val/los'.*Validate"):
        train.run(**cases.RUN, callbacks=[_validate(train, every=7), EarlyStopping(monitor='val/los')])
    train.m('net').close()
