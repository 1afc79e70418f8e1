"""The decay key: schedule lists with start_iter/last_iter/frequency, per-epoch and plateau schedules, their state."""
import math

import numpy as np
import pytest
import torch

from flowpipe import B, Checkpoint, Dataset, I, M, Pipeline, V
from flowpipe.models.torch import MLP
from flowpipe.models.torch.decay import make_decay


CONFIG = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,),
          'optimizer': {'name': 'SGD', 'lr': 1.0}}
WARM_UP_THEN_DECAY = [{'name': 'linear', 'start_factor': 0.25, 'end_factor': 1.0, 'total_iters': 3,
                       'start_iter': 0, 'last_iter': 3},
                      {'name': 'exp', 'gamma': 0.5, 'start_iter': 4, 'frequency': 2}]


def _data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype('float32')
    return x, (x[:, 0] > 0).astype('int64')


def _model(**overrides):
    torch.manual_seed(0)
    return MLP({**CONFIG, **overrides})


def _lrs_used(model, n, x=None, y=None):
    """The learning rate each of ``n`` training batches is stepped with."""
    x, y = _data() if x is None else (x, y)
    used = []
    for _ in range(n):
        used.append(model.optimizer.param_groups[0]['lr'])
        model.train(x=x, y=y)
    return used


def test_a_warm_up_then_a_decay_follow_their_batch_ranges():
    # linear: 0.25 at first, x(1 + 0.75 / (0.75 + 0.75 (k - 1))) after batches 1..3 (its last_iter): 0.5, 0.75, 1;
    # exp from batch 4, every 2nd batch counted from start_iter: halves after batches 4, 6, 8
    used = _lrs_used(_model(decay=WARM_UP_THEN_DECAY), 9)
    assert used == pytest.approx([0.25, 0.5, 0.75, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125], rel=1e-12)


def test_start_iter_and_frequency_count_from_the_start():
    # batchflow's rule: after batch i (1-based), step when start_iter <= i <= last_iter and (i - start_iter) % f == 0
    used = _lrs_used(_model(decay={'name': 'exp', 'gamma': 0.5, 'start_iter': 2, 'last_iter': 8, 'frequency': 3}), 10)
    assert used == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125]


@pytest.mark.parametrize('decay, match', [
    ({'name': 'exp', 'gamma': 0.5, 'start_iter': -1}, r"'start_iter' as a non-negative int.*start_iter=-1"),
    ({'name': 'exp', 'gamma': 0.5, 'start_iter': 5, 'last_iter': 2}, r"'last_iter' >= 'start_iter'.*Swap them"),
    ({'name': 'exp', 'gamma': 0.5, 'frequency': 'epochs'}, r"'frequency' as a positive int .* or 'epoch'.*"
                                                           r"frequency='epochs'"),
    ([{'name': 'exp', 'gamma': 0.5}, {'gamma': 0.5}], r"'name' in the decay dict"),
])
def test_bad_schedule_keys_are_named(decay, match):
    with pytest.raises(ValueError, match=match):
        _model(decay=decay)


def test_a_bad_range_leaves_the_learning_rate_alone():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError):
        make_decay([{'name': 'linear', 'start_factor': 0.5}, {'name': 'exp', 'gamma': 0.5, 'last_iter': -2}],
                   optimizer)
    with pytest.raises(ValueError):
        make_decay({'name': 'linear', 'start_factor': 0.5, 'frequency': 0}, optimizer)
    assert optimizer.param_groups[0]['lr'] == 0.5    # the first, valid, schedule of the list was made


def test_plateau_steps_on_the_training_loss_by_hand():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    decay = make_decay({'name': 'ReduceLROnPlateau', 'factor': 0.5, 'patience': 1}, optimizer)
    lrs = []
    for iteration, loss in enumerate([1.0, 0.9, 0.95, 0.96, 0.8, 0.85, 0.85, 0.85], 1):
        decay.after_batch(iteration, 4, lambda loss=loss: loss)
        lrs.append(optimizer.param_groups[0]['lr'])
    # best 1.0, 0.9; then two batches not better (more than patience=1): halved after batch 4; best 0.8 at
    # batch 5, then 6 and 7 not better: halved after batch 7
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]


def test_a_plateau_model_trains_and_steps_on_its_loss():
    # a learning rate this small leaves the loss unchanged within the plateau's threshold: no batch improves
    model = _model(optimizer={'name': 'SGD', 'lr': 1e-12},
                   decay={'name': 'ReduceLROnPlateau', 'factor': 0.5, 'patience': 1})
    used = _lrs_used(model, 8)
    assert used == pytest.approx([1e-12] * 3 + [5e-13] * 2 + [2.5e-13] * 2 + [1.25e-13], rel=1e-12)


def test_step_on_feeds_the_plateau_instead_of_the_training_loss():
    model = _model(optimizer={'name': 'SGD', 'lr': 1e-12},
                   decay=[{'name': 'exp', 'gamma': 1.0}, {'name': 'plateau', 'factor': 0.5, 'patience': 0}])
    for value in (1.0, 0.5, 0.7):
        model.decay.step_on(value)
    assert model.optimizer.param_groups[0]['lr'] == pytest.approx(5e-13, rel=1e-12)
    _lrs_used(model, 4)     # would halve it twice on the training loss
    assert model.optimizer.param_groups[0]['lr'] == pytest.approx(5e-13, rel=1e-12)
    with pytest.raises(ValueError, match=r"ReduceLROnPlateau schedule .* Add \{'name': 'ReduceLROnPlateau'"):
        _model(decay={'name': 'exp', 'gamma': 0.5}).decay.step_on(1.0)


def _lr(model):
    return model.optimizer.param_groups[0]['lr']


class Crash(Exception):
    """The failure a test injects into a run."""


def _crash_at(at):
    def crash(number):
        if number == at:
            raise Crash(f'batch {number}')
    return crash


def _epoch_pipeline(decay, n_items=10, crash=None):
    """Records the learning rate after each batch in ``lrs``."""
    x, y = _data(n_items)
    torch.manual_seed(0)
    template = (Pipeline().init_model('net', MLP, config={**CONFIG, 'decay': decay}).init_variable('lrs', [])
                .train_model('net', x=B.x, y=B.y).call(_lr, M('net'), save_to=V('lrs', mode='a')))
    if crash is not None:
        template = template.call(crash, I('c'))
    return template << Dataset(n_items, preloaded={'x': x, 'y': y})


def test_per_epoch_steps_after_the_batch_that_ends_each_epoch():
    # 10 items in batches of 4, 3 epochs as one stream: 8 batches; epochs end at items 10, 20, 30, in batches 3, 5, 8
    done = _epoch_pipeline({'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch'}).run(4, n_epochs=3)
    assert done.v('lrs') == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125]


def test_per_epoch_with_drop_last_steps_every_epoch_s_last_batch():
    # 10 items, batches of 4, the tail of 2 dropped: 2 batches an epoch
    done = _epoch_pipeline({'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch'}).run(4, n_epochs=3, drop_last=True)
    assert done.v('lrs') == [1.0, 0.5, 0.5, 0.25, 0.25, 0.125]


def test_per_epoch_keeps_to_its_batch_range():
    decay = [{'name': 'linear', 'start_factor': 0.5, 'total_iters': 1, 'last_iter': 1},
             {'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch', 'start_iter': 4}]
    done = _epoch_pipeline(decay).run(4, n_epochs=3)
    # linear: 0.5 then 1.0 after batch 1; exp: not after batch 3 (before start_iter), after 5 and 8
    assert done.v('lrs') == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25]


def test_per_epoch_outside_a_run_is_an_error_naming_the_fix():
    model = _model(decay={'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch'})
    with pytest.raises(ValueError, match=r"items per epoch for decay frequency='epoch'.*pipeline\.run.*"
                                         r"model\.decay\.epoch_items"):
        _lrs_used(model, 1)
    assert model.iteration == 0 and model.decay.items_seen == 0      # refused before the step
    model.decay.epoch_items = 24        # two batches of the 12 items
    assert _lrs_used(model, 4) == [1.0, 1.0, 0.5, 0.5]


@pytest.mark.parametrize('prefetch', [0, 4])
def test_a_resumed_run_ends_with_the_same_learning_rates(tmp_path, prefetch):
    decay = [{'name': 'linear', 'start_factor': 0.25, 'total_iters': 3, 'last_iter': 3},
             {'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch', 'start_iter': 4},
             {'name': 'plateau', 'factor': 0.5, 'patience': 1, 'frequency': 2}]
    run = {'n_epochs': 4, 'shuffle': 3, 'prefetch': prefetch}
    reference = _epoch_pipeline(decay).run(4, **run)
    with pytest.raises(Crash):
        _epoch_pipeline(decay, crash=_crash_at(6)).run(4, **run, checkpoint=Checkpoint(tmp_path))
    resumed = _epoch_pipeline(decay, crash=_crash_at(-1)).run(4, **run, checkpoint=tmp_path, resume=True)
    assert resumed.v('lrs') == reference.v('lrs') and len(reference.v('lrs')) == 10
    assert _lr(resumed.m('net')) == _lr(reference.m('net'))
    assert resumed.m('net').decay.state() == reference.m('net').decay.state()
    assert resumed.m('net').decay.items_seen == 40      # resumed after 28 items: not at an epoch's end


def test_save_and_load_keep_every_schedule_and_the_epoch_count(tmp_path):
    model = _model(decay=WARM_UP_THEN_DECAY + [{'name': 'exp', 'gamma': 0.9, 'frequency': 'epoch'}])
    model.decay.epoch_items = 18
    _lrs_used(model, 5)
    model.save(tmp_path / 'model')
    loaded = MLP.from_file(tmp_path / 'model')
    loaded.decay.epoch_items = 18
    assert loaded.decay.items_seen == 60 and loaded.decay.state() == model.decay.state()
    assert _lrs_used(loaded, 4) == _lrs_used(model, 4)


def test_a_single_scheduler_s_state_of_an_older_file_loads():
    model = _model(decay={'name': 'exp', 'gamma': 0.5})
    _lrs_used(model, 2)
    other = _model(decay={'name': 'exp', 'gamma': 0.5})
    other.decay.load_state(model.decay.scheduler.state_dict())      # what files held before schedule lists
    assert other.decay.scheduler.last_epoch == 2 and other.decay.items_seen == 0
    with pytest.raises(ValueError, match=r"saved state of 2 decay schedules\. Received: 1"):
        _model(decay=WARM_UP_THEN_DECAY).decay.load_state(model.decay.state())


def test_per_epoch_after_a_rebatch_is_an_error_naming_the_fix():
    x, y = _data(10)
    pipeline = (Pipeline().init_model('net', MLP, config={**CONFIG, 'decay': {'name': 'exp', 'gamma': 0.5,
                                                                             'frequency': 'epoch'}})
                .rebatch(3).train_model('net', x=B.x, y=B.y)) << Dataset(10, preloaded={'x': x, 'y': y})
    with pytest.raises(ValueError, match=r"frequency='epoch'.*after a rebatch"):
        pipeline.run(4, n_epochs=2)
