"""A run with callbacks interrupted and resumed from its checkpoint ends as the uninterrupted one: the same stop
epoch, learning rates, logged rows and best files (replicas, micro-batches, with and without prefetch)."""
import csv
import os
import signal

import numpy as np
import pytest
import torch

from flowpipe import B, Checkpoint, Pipeline, RunStopped, V
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
    files = sorted(name for name in os.listdir(os.path.join(folder, 'best')) if name.endswith('.model'))
    weights = []
    for name in files:
        model = TorchModel.from_file(os.path.join(folder, 'best', name))
        weights.append([p.detach().clone() for p in model.model.parameters()])
        model.close()
    with open(os.path.join(folder, 'logs', 'metrics.csv')) as file:
        rows = list(csv.DictReader(file))
    assert len({row.pop('run') for row in rows}) == 1         # one run's rows, resumed or not
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


class CtrlCAt(EarlyStopping):
    """Presses Ctrl-C at the end of epoch ``at``, after EarlyStopping's own decision (the next callbacks have not
    run)."""

    def __init__(self, at, **kwargs):
        super().__init__(**kwargs)
        self.at = at

    def on_epoch_end(self, run, epoch):
        super().on_epoch_end(run, epoch)
        if epoch == self.at:
            self.at = None
            self.interrupt()

    def interrupt(self):
        raise KeyboardInterrupt


def _stopped_and_resumed(tmp_path, stopper, error):
    """A run whose ``stopper`` (in EarlyStopping's place) interrupts it at epoch 2's end with ``error``, resumed
    with ``Checkpoint(every=4)``: the checkpoint files after the stop, and the endings of the resumed run and of
    the run never stopped."""
    def make(train, folder, at=None):
        early, best, callbacks = _callbacks(train, folder)
        callbacks[1] = early = stopper(at, monitor='val/loss', patience=2, min_delta=0.01)
        return early, best, callbacks
    train = cases.pipeline()
    early, best, callbacks = make(train, tmp_path / 'whole')
    train.run(**RUN, callbacks=callbacks)
    whole = _ending(train, early, best, tmp_path / 'whole')

    spec = Checkpoint(tmp_path / 'checkpoints', every=4)
    first = cases.pipeline()
    with pytest.raises(error):
        first.run(**RUN, checkpoint=spec, callbacks=make(first, tmp_path / 'parts', at=2)[2])
    first.m('net').close()
    files = os.listdir(tmp_path / 'checkpoints')
    again = cases.pipeline()
    early, best, callbacks = make(again, tmp_path / 'parts')
    again.run(**RUN, checkpoint=spec, resume=True, callbacks=callbacks)
    return files, whole, _ending(again, early, best, tmp_path / 'parts')


def _assert_same_ending(resumed, whole):
    for key in ('stop', 'files', 'rows', 'lrs', 'score'):
        assert resumed[key] == whole[key], key
    cases.assert_same(resumed['outcome'], whole['outcome'])


def test_ctrl_c_inside_the_callbacks_resumes_from_the_checkpoint_before(tmp_path):
    files, whole, resumed = _stopped_and_resumed(tmp_path, CtrlCAt, KeyboardInterrupt)
    # Ctrl-C in the callbacks of batch 15 (epoch 2's end): the model has trained on it and some callbacks have
    # run, so no checkpoint can be written for it, nor for batch 14 any longer: the latest stays batch 12's
    assert files == ['checkpoint-000000012.flowpipe']
    _assert_same_ending(resumed, whole)


def test_resuming_a_run_that_stopped_trains_no_more(tmp_path):
    train = cases.pipeline()
    early, _, callbacks = _callbacks(train, tmp_path / 'run')
    train.run(**RUN, checkpoint=tmp_path / 'checkpoints', callbacks=callbacks)
    steps = train.m('net').iteration
    train.m('net').close()
    again = cases.pipeline()
    early, _, callbacks = _callbacks(again, tmp_path / 'run')
    again.run(**RUN, checkpoint=tmp_path / 'checkpoints', resume=True, callbacks=callbacks)
    assert again.m('net').iteration == steps == (early.stopped_epoch + 1) * 5
    again.m('net').close()


def test_resume_with_other_callbacks_is_refused(tmp_path):
    from flowpipe import CheckpointError
    train = cases.pipeline()
    train.run(cases.BATCH, n_iters=2, checkpoint=tmp_path / 'checkpoints')
    train.m('net').close()
    again = cases.pipeline()
    with pytest.raises(CheckpointError, match='without callbacks='):
        again.run(cases.BATCH, n_iters=2, checkpoint=tmp_path / 'checkpoints', resume=True,
                  callbacks=[EarlyStopping('train/loss')])
    again.m('net').close()


class SignalAt(CtrlCAt):
    """Sends this process SIGTERM at the end of epoch ``at``, after EarlyStopping's own decision."""

    def interrupt(self):
        os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_inside_the_callbacks_finishes_them_and_writes_the_batch_s_checkpoint(tmp_path):
    files, whole, resumed = _stopped_and_resumed(tmp_path, SignalAt, RunStopped)
    # the signal comes in the callbacks of batch 15 (epoch 2's end): they all run, then its checkpoint is written
    assert files == ['checkpoint-000000015.flowpipe']
    _assert_same_ending(resumed, whole)
