"""nan in what callbacks watch: a nan monitored value is skipped with one warning naming it, non-finite arguments
are refused, and a step skipped for a non-finite loss is left out of ``train/loss`` and counted."""
import math
import warnings

import numpy as np
import pytest

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.callbacks import Callback, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, Validate
from flowpipe.models.torch.checks import NonFiniteLossWarning

from ..execution import checkpoint_cases as cases
from .fake_run import FakeRun, feed, one_model_pipeline

NAN = math.nan


def _caught(function):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = function()
    return result, [str(warning.message) for warning in caught]


class Logs(Callback):
    order = 2

    def __init__(self):
        self.rows = []

    def on_epoch_end(self, run, epoch):
        self.rows.append(dict(run.logs))


def test_a_nan_value_neither_stops_nor_counts_and_is_warned_about_once():
    early = EarlyStopping(patience=0)
    stops, messages = _caught(lambda: feed(early, [NAN, NAN, 1.0, NAN, 0.5, 0.7]))
    assert stops == [5] and early.stopped_epoch == 5 and early.best == 0.5      # the nan epochs change nothing
    assert len(messages) == 1 and "EarlyStopping skips epoch 0: monitor='val/loss' is nan" in messages[0]


def test_a_nan_value_does_not_lower_the_learning_rate():
    run = FakeRun(one_model_pipeline(lr=1.0))
    plateau = ReduceLROnPlateau('net', patience=0, factor=0.5)
    _, messages = _caught(lambda: feed(plateau, [1.0, NAN, NAN, NAN], run=run))
    assert [group['lr'] for group in run.pipeline.m('net').optimizer.param_groups] == [1.0, 2.0]
    assert plateau.bad_epochs == 0 and plateau.best == 1.0
    assert len(messages) == 1 and "monitor='val/loss' is nan" in messages[0]


def test_a_run_whose_validation_is_nan_trains_every_epoch_at_its_rate():
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    val = Pipeline().import_model('net', train) << train.dataset
    early, plateau = EarlyStopping(patience=0), ReduceLROnPlateau('net', patience=0, factor=0.5)
    logs = Logs()
    done, messages = _caught(lambda: train.run(**cases.RUN, callbacks=[
        Validate(val, batch_size=20, metrics={'loss': lambda p: NAN}), early, plateau, logs]))
    assert done.m('net').iteration == 15 and early.stopped_epoch is None          # three whole epochs
    assert [row['lr'] for row in logs.rows] == pytest.approx([0.01 * 0.9 ** (5 * k) for k in (1, 2, 3)])
    assert [m.split(':')[0] for m in messages if 'is nan' in m] == ['EarlyStopping skips epoch 0',
                                                                      'ReduceLROnPlateau skips epoch 0']
    done.m('net').close()


def test_model_checkpoint_saves_no_nan_epoch_and_says_so(tmp_path):
    run = FakeRun(one_model_pipeline())
    best = ModelCheckpoint(tmp_path, save_top_k=2)
    _, messages = _caught(lambda: feed(best, [NAN], run=run))
    assert best.kept == [] and len(messages) == 1 and 'ModelCheckpoint skips epoch 0' in messages[0]


@pytest.mark.parametrize('make, name', [
    (lambda value: EarlyStopping(min_delta=value), 'min_delta'),
    (lambda value: ReduceLROnPlateau('net', threshold=value), 'threshold'),
    (lambda value: ReduceLROnPlateau('net', min_lr=value), 'min_lr'),
    (lambda value: ReduceLROnPlateau('net', eps=value), 'eps')])
@pytest.mark.parametrize('value', [NAN, math.inf, -1.0])
def test_non_finite_or_negative_numbers_are_refused(make, name, value):
    with pytest.raises(ValueError, match=f"Expected .*{name} as a finite number >= 0. Received: {name}="):
        make(value)


def test_a_skipped_step_is_left_out_of_the_training_loss_and_counted():
    x = np.random.default_rng(0).normal(size=(12, 6))
    x[4] = np.nan                                  # batch 1 of each epoch (4 items a batch) has a nan loss
    dataset = Dataset(12, preloaded={'x': x, 'y': np.zeros(12, dtype=int)})
    config = {'model': cases.network(), 'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x',
              'loss': 'ce', 'optimizer': 'SGD'}
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset
    logs = Logs()
    with pytest.warns(NonFiniteLossWarning):
        pipeline.run(4, n_epochs=2, callbacks=[logs])
    losses = np.array(pipeline.v('loss')).reshape(2, 3)
    assert np.isnan(losses[:, 1]).all() and np.isfinite(losses[:, [0, 2]]).all()
    assert [row['train/loss'] for row in logs.rows] == pytest.approx(list(losses[:, [0, 2]].mean(axis=1)))
    assert [row['train/skipped_steps'] for row in logs.rows] == [1, 1]
    assert pipeline.m('net').skipped_steps == 2
    pipeline.m('net').close()


def test_a_run_without_skipped_steps_logs_no_count():
    logs = Logs()
    cases.pipeline(devices=('CPU',), microbatch=None, augment=False).run(**cases.RUN, callbacks=[logs]).m('net').close()
    assert all('train/skipped_steps' not in row and math.isfinite(row['train/loss']) for row in logs.rows)
