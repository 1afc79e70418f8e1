"""The run's events: the order callbacks hear them in, stopping, the epoch's training loss, bad arguments."""
import numpy as np
import pytest

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.callbacks import Callback
from flowpipe.execution.run import RunArgs

from . import checkpoint_cases as cases


class Recorder(Callback):
    """Records every event; stops the run at the end of epoch ``stop_at``."""

    def __init__(self, stop_at=None, order=1):
        self.events, self.stop_at, self.order = [], stop_at, order

    def on_run_start(self, run):
        self.events.append(('start', run.step))

    def on_batch_end(self, run, batch):
        self.events.append(('batch', run.step, run.pipeline.m('net').iteration))

    def on_epoch_end(self, run, epoch):
        self.events.append(('epoch', epoch, run.step, dict(run.logs)))
        if epoch == self.stop_at:
            run.stop()

    def on_run_end(self, run):
        self.events.append(('end', run.step))


@pytest.mark.parametrize('prefetch', [0, 4])
def test_events_come_in_batch_order_after_the_model_step(prefetch):
    recorder = Recorder()
    done = cases.pipeline().run(**cases.RUN, prefetch=prefetch, callbacks=[recorder])
    per_epoch = cases.N_ITEMS // cases.BATCH
    batches = [event for event in recorder.events if event[0] == 'batch']
    assert batches == [('batch', step, step) for step in range(1, 16)]     # the step of each batch is done
    epochs = [event[:3] for event in recorder.events if event[0] == 'epoch']
    assert epochs == [('epoch', epoch, (epoch + 1) * per_epoch) for epoch in range(cases.EPOCHS)]
    assert recorder.events[0] == ('start', 0) and recorder.events[-1] == ('end', 15)
    losses = done.v('loss')                           # train/loss: the mean of the epoch's step losses
    for _, epoch, _, logs in (event for event in recorder.events if event[0] == 'epoch'):
        assert logs['train/loss'] == pytest.approx(np.mean(losses[epoch * per_epoch:(epoch + 1) * per_epoch]))
        # lr: the optimizer's as the epoch ends (the config's decay steps after every batch)
        assert logs['epoch'] == epoch and logs['lr'] == pytest.approx(0.01 * 0.9 ** ((epoch + 1) * per_epoch))
    done.m('net').close()


@pytest.mark.parametrize('prefetch', [0, 4])
def test_a_stop_ends_the_run_after_the_batch_and_no_later_batch_trains(prefetch):
    recorder = Recorder(stop_at=1)
    done = cases.pipeline().run(**cases.RUN, prefetch=prefetch, callbacks=[recorder])
    assert done.m('net').iteration == 10 and len(done.v('loss')) == 10
    assert recorder.events[-1] == ('end', 10)
    done.m('net').close()


def test_gen_batch_calls_the_callbacks_as_the_loop_goes_on():
    recorder = Recorder(stop_at=0)
    pipeline = cases.pipeline()
    seen = [batch for batch in pipeline.gen_batch(**cases.RUN, prefetch=2, callbacks=[recorder])]
    assert len(seen) == 5 and pipeline.m('net').iteration == 5
    pipeline.m('net').close()


def test_loggers_see_what_earlier_stages_log_whatever_the_list_order():
    class Producer(Callback):
        order = 0

        def on_epoch_end(self, run, epoch):
            run.logs['val/x'] = epoch * 2.0
    recorder = Recorder(order=2)
    cases.pipeline().run(**cases.RUN, callbacks=[recorder, Producer()]).m('net').close()
    assert [event[3]['val/x'] for event in recorder.events if event[0] == 'epoch'] == [0.0, 2.0, 4.0]


def test_the_training_loss_is_logged_whatever_the_fetches():
    dataset = Dataset(12, preloaded={'x': np.ones((12, 6)), 'y': np.zeros(12, dtype=int)})
    config = {'model': cases.network(), 'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x',
              'loss': 'ce', 'optimizer': 'SGD'}
    for fetches, kept in ((None, None), ('predictions', np.ndarray), (('predictions',), tuple)):
        recorder = Recorder()
        pipeline = (Pipeline().init_variable('out', None).init_model('net', config=config)
                    .train_model('net', x=B.x, y=B.y, fetches=fetches, save_to=V('out'))) << dataset
        pipeline.run(6, n_epochs=1, callbacks=[recorder])
        logs = [event[3] for event in recorder.events if event[0] == 'epoch'][0]
        assert np.isfinite(logs['train/loss'])
        assert (pipeline.v('out') is None) if kept is None else isinstance(pipeline.v('out'), kept)
        pipeline.m('net').close()


def test_bad_callbacks_are_refused_before_any_batch():
    with pytest.raises(TypeError, match='flowpipe.callbacks.Callback'):
        RunArgs.merge(None, batch_size=4, callbacks=[print])
    with pytest.raises(TypeError, match='list of flowpipe.callbacks'):
        RunArgs.merge(None, batch_size=4, callbacks='early')
    with pytest.raises(ValueError, match="target='threads'"):
        RunArgs.merge(None, batch_size=4, prefetch=2, target='processes', callbacks=[Recorder()])
    dataset = Dataset(8, preloaded={'x': np.ones((8, 2))})
    with pytest.raises(ValueError, match='without rebatch'):
        (Pipeline().rebatch(4) << dataset).run(2, callbacks=[Recorder()])


def test_without_drop_last_an_epoch_ends_after_the_batch_holding_its_last_item():
    class Ends(Callback):
        def __init__(self):
            self.ends = []

        def on_epoch_end(self, run, epoch):
            self.ends.append((epoch, run.step))
    ends = Ends()
    (Pipeline() << Dataset(10)).run(4, n_epochs=3, callbacks=[ends])      # items 0..29 in 8 batches, the last short
    assert ends.ends == [(0, 3), (1, 5), (2, 8)]
    ends = Ends()
    (Pipeline() << Dataset(10)).run(4, n_epochs=3, drop_last=True, callbacks=[ends])
    assert ends.ends == [(0, 2), (1, 4), (2, 6)]


@pytest.mark.parametrize('prefetch', [0, 4])
def test_callbacks_leave_the_training_bit_identical(prefetch):
    plain = cases.outcome(cases.pipeline().run(**cases.RUN, seed=3, prefetch=prefetch))
    heard = cases.outcome(cases.pipeline().run(**cases.RUN, seed=3, prefetch=prefetch, callbacks=[Recorder()]))
    cases.assert_same(heard, plain)
