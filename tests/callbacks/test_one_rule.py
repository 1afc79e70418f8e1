"""One plateau rule (``Plateau``) behind every EarlyStopping and ReduceLROnPlateau, and one ``EarlyStopping`` class for
the run and the model."""
import math
import warnings
from types import SimpleNamespace

import pytest
import torch

import flowpipe.callbacks as run_callbacks
import flowpipe.models.torch.callbacks as model_callbacks
from flowpipe import StopPipeline
from flowpipe.callbacks import EarlyStopping
from flowpipe.callbacks.plateau import Plateau
from flowpipe.models.torch import MLP

from .fake_run import FakeRun, feed, one_model_pipeline


def _model(lr=0.1):
    return SimpleNamespace(iteration=0, optimizer=SimpleNamespace(param_groups=[{'lr': lr}]))


def _steps(callback, losses):
    """Feed step losses as a model does; the iterations at which the callback stopped."""
    stops = []
    for loss in losses:
        callback.model.iteration += 1
        try:
            callback.on_train_step_end(callback.model, {'loss': loss})
        except StopPipeline:
            stops.append(callback.model.iteration)
    return stops


def test_every_early_stopping_and_reduce_lr_decides_by_one_plateau_rule():
    assert model_callbacks.EarlyStopping is run_callbacks.EarlyStopping
    deciders = [run_callbacks.EarlyStopping(), run_callbacks.ReduceLROnPlateau('net'),
                model_callbacks.EarlyStopping().bind(_model()), model_callbacks.ReduceLROnPlateau().bind(_model())]
    assert all(type(callback.rule) is Plateau for callback in deciders[1:])
    feed(deciders[0], [1.0])                            # placed in a run: Keras's settings
    assert type(deciders[0].rule) is Plateau
    assert [callback.rule.statistic for callback in deciders] == ['last', 'last', 'halves', 'halves']


@pytest.mark.parametrize('mode, patience, cooldown', [('min', 1, 0), ('min', 0, 2), ('max', 2, 1)])
def test_the_rule_with_torch_s_settings_reduces_where_torch_does(mode, patience, cooldown):
    values = [1.0, 0.9, 0.9, 0.95, 0.91, 0.5, 0.5, 0.5, 0.6, 0.49, 0.49, 0.49, 0.49, 0.7]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=mode, factor=0.5, patience=patience,
                                                           cooldown=cooldown, threshold=1e-4)
    rule, ours, theirs = Plateau.torch(mode, patience, 1e-4, cooldown), [], []
    for step, value in enumerate(values):
        if rule.update(value):
            rule.acted()
            ours.append(step)
        before = optimizer.param_groups[0]['lr']
        scheduler.step(value)
        if optimizer.param_groups[0]['lr'] < before:
            theirs.append(step)
    assert ours == theirs and ours


def test_one_early_stopping_takes_the_rule_of_where_it_goes():
    given = EarlyStopping(patience=3)
    in_model = MLP({'inputs/images/shape': (4,), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
                    'body/units': (8,), 'callbacks': [given]}).callbacks[0]
    assert (in_model.monitor, in_model.mode, in_model.patience, in_model.min_delta) == ('loss', 'complex', 3, 0.001)
    assert in_model.rule.window == 3 and in_model is not given
    assert feed(given, [1.0, 0.9, 0.95, 0.96, 0.97]) == [4]        # Keras's: 3 epochs without improvement
    assert (given.monitor, given.mode, given.stopped_epoch) == ('val/loss', 'min', 4)
    # a batchflow mode is batchflow's windows, a 'min' mode Keras's rule, in a model too
    assert _steps(EarlyStopping(mode='pytorch', patience=2, min_delta=0.0).bind(_model()), [3, 2, 1, 1]) == [4]
    assert _steps(EarlyStopping(mode='min', patience=1).bind(_model()), [3, 2, 2, 1]) == [3]


def test_what_cannot_be_kept_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"monitor='complex'.*EarlyStopping\(mode='complex'"):
        EarlyStopping('complex', 10)                 # batchflow's positional mode
    with pytest.raises(ValueError, match=r"'val/loss', a value of the run's epoch logs.*run\(\.\.\., callbacks"):
        EarlyStopping('val/loss').bind(_model())
    with pytest.raises(ValueError, match="monitor='val/accuracy', mode='max'"):
        EarlyStopping(mode='max')
    with pytest.raises(ValueError, match='min_delta as a finite number >= 0'):
        EarlyStopping(mode='complex', min_delta=-0.1)
    with pytest.raises(ValueError, match="patience >= 2 for mode='complex'"):
        EarlyStopping(patience=1).bind(_model())     # batchflow's default mode needs a window of 2


def test_a_nan_loss_is_skipped_by_a_model_s_rules_with_one_warning():
    stopping = EarlyStopping(mode='pytorch', patience=2, min_delta=0.0).bind(_model())
    reduce = model_callbacks.ReduceLROnPlateau(mode='pytorch', patience=2, min_delta=0.0, cooldown=1).bind(_model())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert _steps(stopping, [3, 2, math.nan, math.nan, 1]) == []     # a nan window would have stopped at 4
        _steps(reduce, [3, 2, math.nan, math.nan, 1])
    assert [str(warning.message).split(':')[0] for warning in caught] == ['EarlyStopping skips step 3',
                                                                          'ReduceLROnPlateau skips step 3']
    assert 'loss is nan' in str(caught[0].message) and 'loss is nan' in str(caught[1].message)
    assert reduce.reduced_at == [] and list(reduce.rule.values) == [2, 1]          # the nan left out


def test_states_of_earlier_versions_load():
    run_level = EarlyStopping(patience=3)
    run_level.load_state({'best': 0.5, 'wait': 2, 'stopped_epoch': None})         # the run's EarlyStopping
    assert feed(run_level, [0.6]) == [0] and run_level.stopped_epoch == 0
    model_level = EarlyStopping(mode='pytorch', patience=2, min_delta=0.0).bind(_model())
    model_level.load_state({'written': False, 'best': 1.0, 'cooldown_counter': 0, 'losses': [1.0, 1.0],
                            'stopped_iteration': None})                              # batchflow's EarlyStopping
    assert _steps(model_level, [1.0]) == [1]


def test_a_reduce_lr_in_a_run_and_a_model_skip_and_count_alike():
    run = FakeRun(one_model_pipeline(lr=1.0))
    plateau = run_callbacks.ReduceLROnPlateau('net', patience=0, factor=0.5)
    feed(plateau, [1.0, 1.0, math.nan, 1.0], run=run)
    assert plateau.rule.bad == 0 and run.pipeline.m('net').optimizer.param_groups[0]['lr'] == 0.25


def test_the_description_is_the_earlier_classes_so_their_checkpoints_find_their_callbacks():
    # what run checkpoints (the callbacks' descriptions) and model configs recorded before the classes were one
    assert repr(EarlyStopping('val/loss', patience=2, min_delta=0.01)) == \
        "EarlyStopping(monitor='val/loss', mode='min', patience=2, min_delta=0.01)"
    assert repr(model_callbacks.EarlyStopping(mode='complex', patience=6, min_delta=0.01)) == \
        "EarlyStopping(mode='complex', patience=6, min_delta=0.01, cooldown=6, stream=None)"
    placed = EarlyStopping(patience=3)
    before = repr(placed)
    feed(placed, [1.0])
    assert repr(placed) == before == 'EarlyStopping(patience=3)'
