"""The callback protocol: every hook receives ``logs``, one dict per event shared by the event's callbacks, the run's
and a model's alike."""
import numpy as np
import pytest

from flowpipe import B, Pipeline, V
from flowpipe.callbacks import Callback, EarlyStopping, Validate
from flowpipe.models.torch import MLP
from flowpipe.models.torch.callbacks import BaseCallback, LogCallback

from ..execution import checkpoint_cases as cases


def _validate(train):
    val = (Pipeline().import_model('net', train).init_variable('losses', [])
           .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << train.dataset
    return Validate(val, batch_size=20, metrics={'loss': lambda p: float(np.mean(p.v('losses')))})


class Seen(Callback):
    """Keeps a copy of the logs each hook receives, and whether they are the run's."""
    order = 2

    def __init__(self):
        self.events = []

    def on_run_start(self, run, logs):
        self.events.append(('start', dict(logs)))

    def on_batch_end(self, run, batch, logs):
        self.events.append(('batch', dict(logs)))

    def on_epoch_end(self, run, epoch, logs):
        self.events.append(('epoch', dict(logs), logs is run.logs))

    def on_run_end(self, run, logs):
        self.events.append(('end', dict(logs)))


def test_a_callback_sees_the_loss_the_validation_metrics_and_the_rate_in_its_logs():
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    seen = Seen()
    done = train.run(**cases.RUN, callbacks=[seen, _validate(train)])
    losses, per_epoch = done.v('loss'), cases.N_ITEMS // cases.BATCH
    batches = [logs for kind, logs, *_ in seen.events if kind == 'batch']
    assert [logs['step'] for logs in batches] == list(range(1, 16))
    assert [logs['train/loss'] for logs in batches] == pytest.approx(losses)       # each batch's own step loss
    epochs = [(logs, shared) for kind, logs, *shared in seen.events if kind == 'epoch']
    assert [logs['epoch'] for logs, _ in epochs] == [0, 1, 2] and all(shared == [True] for _, shared in epochs)
    for epoch, (logs, _) in enumerate(epochs):
        assert logs['train/loss'] == pytest.approx(np.mean(losses[epoch * per_epoch:(epoch + 1) * per_epoch]))
        assert logs['lr'] == pytest.approx(0.01 * 0.9 ** ((epoch + 1) * per_epoch))
        assert np.isfinite(logs['val/loss'])
    assert seen.events[0] == ('start', {}) and seen.events[-1] == ('end', epochs[-1][0])
    done.m('net').close()


def test_a_value_one_callback_sets_in_the_logs_is_what_the_later_ones_see_and_decide_on():
    class Countdown(Callback):
        order = 0

        def on_epoch_end(self, run, epoch, logs):
            logs['val/left'] = 1.0              # never improves: EarlyStopping(patience=1) stops at epoch 1

    stopper, seen = EarlyStopping('val/left', patience=1), Seen()
    done = cases.pipeline(devices=('CPU',), microbatch=None, augment=False).run(
        **cases.RUN, callbacks=[seen, stopper, Countdown()])
    assert [logs['val/left'] for kind, logs, *_ in seen.events if kind == 'epoch'] == [1.0, 1.0]
    assert stopper.stopped_epoch == 1 and done.m('net').iteration == 10
    done.m('net').close()


def _config(**more):
    return {'inputs/images/shape': (4,), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
            'body/units': (8,), 'optimizer': {'name': 'SGD', 'lr': 0.1}, **more}


def test_a_model_s_callbacks_share_the_step_s_logs():
    class Smooth(BaseCallback):
        def on_train_step_end(self, model, logs):
            logs['loss/double'] = 2 * logs['loss']

    class Record(BaseCallback):
        def reset(self):
            super().reset()
            self.rows = []

        def on_train_step_end(self, model, logs):
            self.rows.append(dict(logs))

    model = MLP(_config(callbacks=[Smooth(), Record()]))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 4)).astype('float32'), rng.integers(0, 3, 6)
    losses = [float(model.train(images=x, labels=y, fetches='loss')) for _ in range(2)]
    rows = model.callbacks[1].rows
    assert [row['iteration'] for row in rows] == [1, 2] and [row['loss'] for row in rows] == pytest.approx(losses)
    assert [row['loss/double'] for row in rows] == pytest.approx([2 * loss for loss in losses])
    assert rows[0]['lr'] == 0.1 and rows[0]['batch_size'] == 6 and rows[0]['inputs_shapes'] == [(6, 4)]


def test_a_model_only_callback_in_a_run_is_refused():
    with pytest.raises(TypeError, match="model's training steps only.*model config's 'callbacks'"):
        cases.pipeline().run(**cases.RUN, callbacks=[LogCallback(stream=print)])


def test_the_loss_a_run_logs_is_its_own_steps_even_when_another_run_of_the_pipeline_trains_meanwhile():
    pipeline, seen = cases.pipeline(devices=('CPU',), microbatch=None, augment=False), Seen()
    with_callbacks = pipeline.gen_batch(cases.BATCH, n_epochs=1, callbacks=[seen])
    without = pipeline.gen_batch(cases.BATCH, n_epochs=1)
    for _ in range(cases.N_ITEMS // cases.BATCH):          # the two runs' steps alternate
        next(with_callbacks)
        next(without)
    assert next(with_callbacks, None) is None and next(without, None) is None
    losses = pipeline.v('loss')
    assert len(losses) == 2 * cases.N_ITEMS // cases.BATCH
    batches = [logs['train/loss'] for kind, logs, *_ in seen.events if kind == 'batch']
    assert batches == pytest.approx(losses[0::2])           # the other run's losses are not the callbacks' run's
    epoch = [logs for kind, logs, *_ in seen.events if kind == 'epoch'][0]
    assert epoch['train/loss'] == pytest.approx(np.mean(losses[0::2]))
    pipeline.m('net').close()
