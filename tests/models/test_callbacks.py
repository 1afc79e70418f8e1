"""batchflow's model callbacks (config key ``callbacks``): each rule on a fixed loss sequence acts where batchflow's
rule says, the state travels with model files and run checkpoints, a pipeline run stops and says so."""
import warnings
from types import SimpleNamespace

import dill
import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, I, Pipeline, StopPipeline, V
from flowpipe.models.torch import MLP
from flowpipe.models.torch import callbacks as callbacks_module
from flowpipe.models.torch.callbacks import EarlyStopping, LogCallback, ReduceLROnPlateau



def _fake_model(*rates):
    return SimpleNamespace(iteration=0, optimizer=SimpleNamespace(param_groups=[{'lr': lr} for lr in rates]))


def _feed(callback, losses):
    """Give ``callback`` the losses of steps 1, 2, ... as the model does; the iteration it raised at, or None."""
    model = callback.model
    for loss in losses:
        model.iteration += 1
        try:
            callback.on_iter_end(loss)
        except StopPipeline:
            return model.iteration
    return None


# The rules, computed by hand from batchflow's: the first `patience` steps are not checked; then the window is the
# last `patience` losses (the current step's included) and the loss is on a plateau unless the window's value is
# below the compared one by more than min_delta.

def test_early_stopping_pytorch_and_keras_modes():
    losses = [5, 4, 3, 2, 1.5, 1.45, 1.42]
    # steps 1-3 unchecked; 4: min(4, 3, 2) = 2 < inf -> best 2; 5: min(3, 2, 1.5) = 1.5 < 2 - 0.1 -> best 1.5;
    # 6: min(2, 1.5, 1.45) = 1.45, not < 1.5 - 0.1 = 1.4 -> stop at 6
    for mode in ('pytorch', 'keras'):
        stopping = EarlyStopping(mode=mode, patience=3, min_delta=0.1).bind(_fake_model(0.1))
        assert _feed(stopping, losses) == 6
        assert stopping.stopped_iteration == 6 and stopping.best == 1.5
        # as in batchflow a stop starts no cooldown: the next step is checked again, min(1.5, 1.45, 1.44) -> stop
        assert _feed(stopping, [1.44]) == 7


def test_early_stopping_mean_mode():
    # 1-2 unchecked; 3: mean(3, 2) = 2.5 -> best; 4: mean(2, 1) = 1.5 -> best; 5: mean(1, 1) = 1 < 1.5 -> best;
    # 6: mean(1, 1) = 1, not < 1 - 0 -> stop at 6
    stopping = EarlyStopping(mode='mean', patience=2, min_delta=0.0).bind(_fake_model(0.1))
    assert _feed(stopping, [4, 3, 2, 1, 1, 1, 1]) == 6


def test_early_stopping_complex_mode_splits_an_odd_patience_as_batchflow():
    # patience 5: batchflow's slices [-5:-5//2] and [-5//2:] are [-5:-3] (older 2) and [-3:] (newer 3).
    # 1-5 unchecked; 6: window (9, 8, 7, 6, 5): mean(7, 6, 5) = 6 < mean(9, 8) - 1 = 7.5 -> on;
    # 7: (8, 7, 6, 5, 5): 5.33 < 6.5; 8: (7, 6, 5, 5, 5): 5 < 5.5; 9: (6, 5, 5, 5, 5): 5, not < 5.5 - 1 -> stop at 9
    # (splitting 3 + 2 would stop at 8: mean(5, 5) = 5 is not < mean(7, 6, 5) - 1 = 5)
    stopping = EarlyStopping(mode='complex', patience=5, min_delta=1.0).bind(_fake_model(0.1))
    assert _feed(stopping, [10, 9, 8, 7, 6, 5, 5, 5, 5, 5]) == 9


def test_reduce_lr_on_plateau_with_cooldown_and_min_lr():
    losses = [3, 2, 1, 1, 1, 1, 1, 1, 0.5, 0.4]
    # 1-2 unchecked; 3: min(2, 1) = 1 -> best 1; 4: min(1, 1) = 1, not < 1 -> reduce, cooldown 2 - 1 = 1 step;
    # 5 skipped; 6: reduce; 7 skipped; 8: reduce; 9 skipped; 10: min(0.5, 0.4) = 0.4 < 1 -> best, no reduction
    reduce = ReduceLROnPlateau(mode='pytorch', patience=2, min_delta=0.0, cooldown=2, factor=0.5,
                               min_lr=0.3).bind(_fake_model(1.0, 0.4))
    assert _feed(reduce, losses) is None
    assert reduce.reduced_at == [4, 6, 8] and reduce.best == 0.4
    # 1.0 -> 0.5 -> 0.3 (not 0.25) -> 0.3; 0.4 -> 0.3 -> 0.3 -> 0.3
    assert [group['lr'] for group in reduce.model.optimizer.param_groups] == [0.3, 0.3]


def test_reduce_lr_on_plateau_without_cooldown_reduces_once_as_batchflow():
    reduce = ReduceLROnPlateau(mode='pytorch', patience=2, min_delta=0.0).bind(_fake_model(1.0))
    _feed(reduce, [3, 2, 1, 1, 1, 1, 1, 1, 1, 1])
    assert reduce.reduced_at == [4]
    assert reduce.model.optimizer.param_groups[0]['lr'] == pytest.approx(0.1)


def test_messages_go_to_the_stream_from_rank_0_only(monkeypatch):
    lines = []
    reduce = ReduceLROnPlateau(mode='pytorch', patience=2, min_delta=0.0, cooldown=2,
                               stream=lines.append).bind(_fake_model(1.0))
    _feed(reduce, [3, 2, 1, 1])
    assert lines == ['ReduceLROnPlateau at iteration 4']
    monkeypatch.setattr(callbacks_module.distributed, 'is_main', lambda: False)
    _feed(reduce, [1, 1])
    assert lines == ['ReduceLROnPlateau at iteration 4'] and reduce.reduced_at == [4, 6]


def test_log_callback_writes_the_mean_loss_every_frequency_steps(tmp_path):
    path = tmp_path / 'train.log'
    path.write_text('an older log\n')
    log = LogCallback(stream=str(path), frequency=2, resources=False).bind(_fake_model(0.1))
    _feed(log, [4.0, 2.0, 1.0, 0.5, 0.25])
    lines = path.read_text().splitlines()           # the file is started afresh by the callback's first line
    assert lines[0] == 'TIMESTAMP   ITERATION : LOSS' and len(lines) == 3
    assert lines[1].endswith('    2: 3.000000') and lines[2].endswith('    4: 0.750000')


def test_log_callback_options_with_a_model(tmp_path):
    lines = []
    model = MLP(_config(callbacks=[LogCallback(stream=lines.append, shapes=True, microbatch=True)], microbatch=4))
    x, y = _data(10)
    model.train(images=x, labels=y)
    assert lines[0].endswith('| MEMORY : GPU_MEMORY : GPU_UTILIZATION | IN_SHAPES : TARGET_SHAPES | '
                             'MICROBATCH_SIZE : N_MICROBATCHES')
    assert lines[1].endswith(' | [(10, 4)] : [(10,)] | 4 : 3')


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="mode in .*Received: mode='max'"):
        EarlyStopping(mode='max')
    with pytest.raises(ValueError, match='patience >= 2'):
        EarlyStopping(mode='complex', patience=1)
    with pytest.raises(TypeError, match='patience as an int'):
        ReduceLROnPlateau(patience=2.5)
    with pytest.raises(ValueError, match='factor'):
        ReduceLROnPlateau(factor=2)
    with pytest.raises(TypeError, match='stream=print'):
        LogCallback(stream=3)
    with pytest.raises(TypeError, match="Expected 'callbacks' as a list of model callbacks"):
        MLP(_config(callbacks=['EarlyStopping']))


# with a model


def _config(**overrides):
    return {'inputs/images/shape': (4,), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
            'body/units': (8,), 'optimizer': {'name': 'SGD', 'lr': 0.1}, **overrides}


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype('float32'), rng.integers(0, 3, n)


def test_the_callbacks_key_is_read_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model = MLP(_config(callbacks=[EarlyStopping(patience=3)]))
    assert len(model.callbacks) == 1


def test_each_model_works_on_its_own_copy():
    given = ReduceLROnPlateau(mode='pytorch', patience=1, min_delta=10.0, cooldown=1)
    first, second = MLP(_config(callbacks=[given])), MLP(_config(callbacks=given))
    x, y = _data(6)
    for _ in range(4):      # 1 unchecked, 2 sets the best (min_delta 10), 3 reduces, cooldown 1 - 1 = 0: 4 reduces
        first.train(images=x, labels=y)
    assert first.callbacks[0].reduced_at == [3, 4]
    assert second.callbacks[0].reduced_at == [] and given.model is None and given.best == float('inf')
    assert first.optimizer.param_groups[0]['lr'] == pytest.approx(0.001)


def _trained(steps, callbacks):
    torch.manual_seed(0)
    model = MLP(_config(callbacks=callbacks, dtype='float64'))
    for _ in range(steps):
        model.train(*_data(6))
    return model


def _rules():
    # on the same batch every step, these reduce at steps 6, 9, 12, 14 and stop at 15
    return [ReduceLROnPlateau(mode='mean', patience=3, min_delta=0.02, cooldown=2, factor=0.5),
            EarlyStopping(mode='complex', patience=6, min_delta=0.01), LogCallback(frequency=4)]


def _run_until_stop(model):
    for _ in range(100):
        try:
            model.train(*_data(6))
        except StopPipeline:
            return model.iteration
    return None


def test_save_and_load_keep_the_state(tmp_path):
    reference = _trained(8, _rules())
    stop = _run_until_stop(reference)
    assert stop is not None and len(reference.callbacks[0].reduced_at) > 1        # the rules acted after step 8
    model = _trained(8, _rules())
    model.save(tmp_path / 'model.pkl')
    loaded = MLP.from_file(tmp_path / 'model.pkl')
    assert [c.state() for c in loaded.callbacks] == [c.state() for c in model.callbacks]
    assert loaded.callbacks[0].state()['losses'] and loaded.callbacks[0].model is loaded
    assert _run_until_stop(loaded) == stop
    assert loaded.callbacks[0].reduced_at == reference.callbacks[0].reduced_at
    assert loaded.optimizer.param_groups[0]['lr'] == reference.optimizer.param_groups[0]['lr']
    copied = dill.loads(dill.dumps(model))          # pickling goes through the same contents
    assert [c.state() for c in copied.callbacks] == [c.state() for c in model.callbacks]


def test_a_file_with_other_callbacks_starts_them_afresh_with_a_warning(tmp_path):
    model = _trained(8, _rules())
    model.save(tmp_path / 'model.pkl')
    with pytest.warns(UserWarning, match='start afresh'):
        loaded = MLP.from_file(tmp_path / 'model.pkl', callbacks=[EarlyStopping(patience=4)])
    assert loaded.callbacks[0].state() == EarlyStopping(patience=4).state()


# in a pipeline

def _dataset(n=48):
    rng = np.random.default_rng(1)
    return Dataset(n, preloaded={'x': rng.normal(size=(n, 4)).astype('float32'), 'y': rng.integers(0, 3, n)})


def _pipeline(callbacks, use_lock=True):
    config = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,),
              'optimizer': {'name': 'SGD', 'lr': 0.2}, 'callbacks': callbacks}
    return (Pipeline().init_variable('loss', [])
            .init_model('net', MLP, config=config)
            .call(_crash, I('c'))
            .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'), use_lock=use_lock)
            ) << _dataset()


class Crash(Exception):
    """The failure a test injects into a run."""


#: the batch number at which `_crash` raises (outside the pipeline's definition, which a resume must repeat)
CRASH = {'at': None}


def _crash(number):
    if number == CRASH['at']:
        raise Crash(f'batch {number}')


@pytest.mark.parametrize('prefetch, use_lock', [(0, True), (3, True), (3, None)])     # None: train_model's default
def test_a_pipeline_run_stops_early_and_says_so(prefetch, use_lock):
    lines = []
    # min_delta larger than any loss: steps 1-2 are not checked, step 3 sets the best, step 4 is a plateau
    stopping = EarlyStopping(mode='pytorch', patience=2, min_delta=100.0, stream=lines.append)
    done = _pipeline([stopping], use_lock).run(8, n_epochs=20, shuffle=3, prefetch=prefetch)
    model = done.m('net')
    assert model.callbacks[0].stopped_iteration == 4 and lines == [lines[0]] and 'at iteration 4' in lines[0]
    assert model.iteration == 4 and len(done.v('loss')) == 3      # no batch after the stop reached the model
    model.close()


def _outcome(done):
    model = done.m('net')
    result = ([p.detach().clone() for p in model.model.parameters()], model.optimizer.param_groups[0]['lr'],
              [c.state() for c in model.callbacks], model.iteration, done.v('loss'))
    model.close()
    return result


@pytest.mark.parametrize('prefetch', [0, 3])
def test_a_crashed_run_with_callbacks_resumes_to_the_uninterrupted_result(tmp_path, prefetch):
    def rules():
        return [ReduceLROnPlateau(mode='mean', patience=4, min_delta=0.0, cooldown=2, factor=0.5),
                EarlyStopping(mode='complex', patience=10, min_delta=0.0)]
    run = {'batch_size': 8, 'n_epochs': 6, 'shuffle': 5, 'prefetch': prefetch}
    reference = _outcome(_pipeline(rules()).run(**run))
    # reduced at steps 6, 10, 12, ..., stopped at step 20 of 36: the crash comes between two reductions
    assert reference[2][0]['reduced_at'][:3] == [6, 10, 12] and reference[2][1]['stopped_iteration'] == 20
    CRASH['at'] = 13
    try:
        with pytest.raises(Crash):
            _pipeline(rules()).run(**run, checkpoint=tmp_path)
    finally:
        CRASH['at'] = None
    resumed = _outcome(_pipeline(rules()).run(**run, checkpoint=tmp_path, resume=True))
    assert all(torch.equal(a, b) for a, b in zip(reference[0], resumed[0]))
    assert reference[1:] == resumed[1:]


def _stopping_job():
    """Train until EarlyStopping stops; what a rank (or the one process) saw."""
    from flowpipe.parallel import distributed
    lines = []
    rules = [ReduceLROnPlateau(mode='mean', patience=3, min_delta=0.0, cooldown=2, factor=0.5, stream=lines.append),
             EarlyStopping(mode='pytorch', patience=4, min_delta=0.01, stream=lines.append)]
    config = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,),
              'optimizer': {'name': 'SGD', 'lr': 0.2}, 'callbacks': rules, 'dtype': 'float64'}
    pipeline = (Pipeline().init_model('net', MLP, config=config)
                .train_model('net', x=B.x.astype('float64'), y=B.y, use_lock=True)) << _dataset()
    pipeline.run(8, n_epochs=20, shuffle=3, seed=5)
    model = pipeline.m('net')
    result = {'states': [c.state() for c in model.callbacks], 'iteration': model.iteration, 'lines': lines,
              'params': [p.detach().numpy().copy() for p in model.model.parameters()], 'rank': distributed.rank()}
    model.close()
    return result


@pytest.mark.slow
def test_every_rank_of_a_distributed_job_stops_at_the_step_one_process_stops_at():
    from flowpipe.parallel import launch
    alone = _stopping_job()
    assert alone['states'][1]['stopped_iteration'] == alone['iteration'] < 120 and alone['lines']
    ranks = launch(_stopping_job, 2, timeout=900)
    assert ranks[0]['states'] == ranks[1]['states']          # the same all-reduced losses: the same decisions
    for rank in ranks:
        reduce, stopping = rank['states']
        assert rank['iteration'] == alone['iteration'] == stopping['stopped_iteration']
        assert reduce['reduced_at'] == alone['states'][0]['reduced_at']
        np.testing.assert_allclose(reduce['losses'], alone['states'][0]['losses'], rtol=1e-12)
        for mine, reference in zip(rank['params'], alone['params']):
            np.testing.assert_allclose(mine, reference, rtol=1e-10)
    assert ranks[0]['lines'] == alone['lines'] and ranks[1]['lines'] == []       # rank 0 alone writes


def test_replicas_and_micro_batches_decide_at_the_steps_one_device_does():
    def trained(**placement):
        torch.manual_seed(0)
        model = MLP(_config(callbacks=_rules(), dtype='float64', **placement))
        stop = _run_until_stop(model)
        states = [c.state() for c in model.callbacks]
        model.close()
        return stop, states
    stop, states = trained()
    other_stop, other = trained(device=['CPU:0', 'CPU:1'], microbatch=2)     # the full-batch loss either way
    assert other_stop == stop == other[1]['stopped_iteration'] and other[0]['reduced_at'] == states[0]['reduced_at']
