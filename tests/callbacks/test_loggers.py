"""Validate, CSVLogger, ModelCheckpoint and TensorBoardLogger in runs of a small training pipeline."""
import csv
import os

import numpy as np
import pytest
import torch

from flowpipe import B, Pipeline, V
from flowpipe.callbacks import CSVLogger, ModelCheckpoint, TensorBoardLogger, Validate
from flowpipe.models.torch import TorchModel

from ..execution import checkpoint_cases as cases
from .fake_run import FakeRun, feed


def _models(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith('.model'))


def _validation(train):
    """A pipeline that predicts the training set with the trained model and keeps each batch's loss."""
    return (Pipeline().import_model('net', train).init_variable('losses', []).init_variable('runs', 0)
            .update(V('runs'), V('runs') + 1)
            .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << train.dataset


def test_validate_logs_metrics_from_fresh_variables_with_the_trained_model(tmp_path):
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    seen = []
    val = _validation(train)
    validate = Validate(val, batch_size=20, metrics={'loss': lambda p: float(np.mean(p.v('losses'))),
                                                     'runs': lambda p: seen.append(p.v('runs')) or len(seen)})
    rows = []

    class Keep(CSVLogger):
        def on_epoch_end(self, run, epoch):
            rows.append(dict(run.logs))
    train.run(**cases.RUN, callbacks=[Keep(tmp_path), validate])         # a logger first: it still sees val/
    assert seen == [2, 2, 2]           # two batches per validation, each from the declared variables
    assert [row['val/runs'] for row in rows] == [1.0, 2.0, 3.0]
    val.reset('variables')
    final = float(np.mean(val.run(20, n_epochs=1).v('losses')))
    assert rows[-1]['val/loss'] == pytest.approx(final)       # the model as the last epoch ended
    train.m('net').close()


def test_validate_every_n_batches_logs_the_last_values():
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    calls = []
    validate = Validate(_validation(train), every=2, batch_size=20, metrics={'n': lambda p: len(calls) + 1})
    original = validate.validate
    validate.validate = lambda: calls.append(1) or original()
    train.run(**cases.RUN, callbacks=[validate])
    assert len(calls) == 15 // 2
    train.m('net').close()
    with pytest.raises(ValueError, match="every='epoch'"):
        Validate(train, every=0, metrics={'a': len})
    with pytest.raises(TypeError, match='metrics'):
        Validate(train, metrics={})


def test_csv_logger_writes_one_row_per_epoch(tmp_path):
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    train.run(**cases.RUN, callbacks=[CSVLogger(tmp_path), Validate(_validation(train), batch_size=40,
                                                                    metrics={'loss': lambda p: p.v('losses')[0]})])
    with open(tmp_path / 'metrics.csv') as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ['run', 'epoch', 'step', 'train/loss', 'lr', 'val/loss']
    assert len({row['run'] for row in rows}) == 1
    assert [(row['epoch'], row['step']) for row in rows] == [('0', '5'), ('1', '10'), ('2', '15')]
    losses = train.v('loss')
    assert [float(row['train/loss']) for row in rows] == pytest.approx([np.mean(losses[i:i + 5]) for i in (0, 5, 10)])
    train.m('net').close()


def test_model_checkpoint_keeps_the_best_k_files(tmp_path):
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    train.run(8, n_iters=1)
    model = train.m('net')
    run = FakeRun(train)
    best = ModelCheckpoint(tmp_path, monitor='val/accuracy', mode='max', save_top_k=2)
    values = [0.5, 0.7, 0.6, 0.7, 0.9, 0.1]
    saved = {}
    for epoch, value in enumerate(values):
        with torch.no_grad():
            next(model.model.parameters()).fill_(epoch)        # each epoch's weights are told apart by epoch
        run.logs = {'val/accuracy': value}
        best.on_epoch_end(run, epoch)
        saved[epoch] = os.path.join(tmp_path, f'epoch-{epoch:04d}.model')
    assert _models(tmp_path) == ['epoch-0001.model', 'epoch-0004.model']   # 0.9, then the earlier 0.7
    assert best.best_score == 0.9 and best.best_path == saved[4]
    restored = TorchModel.from_file(best.best_path)
    assert float(next(restored.model.parameters()).detach().flatten()[0]) == 4.0
    restored.close()
    model.close()


def test_model_checkpoint_off_rank_0_calls_the_collective_save_and_removes_nothing(tmp_path):
    import types
    saved = []
    models = {'net': types.SimpleNamespace(save=saved.append)}      # TorchModel.save: rank 0 writes, all call it
    pipeline = types.SimpleNamespace(state=types.SimpleNamespace(models=models))
    (tmp_path / 'epoch-0000.model').write_text('rank 0 wrote this')
    best = ModelCheckpoint(tmp_path, monitor='val/loss')
    feed(best, [1.0, 0.5], run=FakeRun(pipeline=pipeline, is_main=False))
    assert best.best_score == 0.5 and [os.path.basename(path) for path in saved] == ['epoch-0000.model',
                                                                                    'epoch-0001.model']
    assert os.listdir(tmp_path) == ['epoch-0000.model']            # dropping epoch 0 is rank 0's to do


def test_tensorboard_scalars_read_back(tmp_path):
    pytest.importorskip('tensorboard')
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    logger = TensorBoardLogger(tmp_path)
    run = FakeRun()
    logger.on_run_start(run)
    for epoch in range(3):
        run.logs = {'epoch': epoch, 'train/loss': 1.0 / (epoch + 1), 'val/accuracy': 0.5 + epoch / 10}
        logger.on_epoch_end(run, epoch)
    logger.on_run_end(run)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars('train/loss')] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert 'epoch' not in events.Tags()['scalars']


def test_tensorboard_logger_without_tensorboard_names_the_extra(monkeypatch, tmp_path):
    import sys
    monkeypatch.setitem(sys.modules, 'torch.utils.tensorboard', None)     # as where tensorboard is not installed
    with pytest.raises(ImportError, match=r'flowpipe\[tensorboard\]'):
        TensorBoardLogger(tmp_path).on_run_start(FakeRun())


def test_the_training_pipeline_or_one_that_trains_is_refused_as_validation():
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    for val in (train, train << {'unused': 1}):       # itself, or a pipeline made from its template
        with pytest.raises(ValueError, match=r"does not train. Received: one with train_model\('net'.*import_model"):
            Validate(val, batch_size=20, metrics={'loss': lambda p: 0.0})
    counter = Pipeline().init_variable('n', 0).update(V('n'), V('n') + 1) << train.dataset
    validate = Validate(counter, batch_size=20, metrics={'n': lambda p: p.v('n')})
    with pytest.raises(ValueError, match='apart from the training one.*import_model'):
        counter.run(8, n_epochs=2, callbacks=[validate])
    assert counter.v('n') == 0                         # refused before the first batch
    assert validate.validate() == {'val/n': 2.0}       # a pipeline that does not train validates
