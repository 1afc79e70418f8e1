"""ReduceLROnPlateau: the learning rates follow torch's own ReduceLROnPlateau on the same values."""
import pytest
import torch

from flowpipe.callbacks import ReduceLROnPlateau
from flowpipe.pipeline.model_actions import PendingModel

from ..execution import checkpoint_cases as cases
from .fake_run import FakeRun, one_model_pipeline


@pytest.mark.parametrize('mode, factor, patience, cooldown, min_lr', [
    ('min', 0.5, 1, 0, 0.0), ('min', 0.1, 0, 2, 0.05), ('max', 0.5, 2, 1, 0.0)])
def test_rates_follow_torch_rule(mode, factor, patience, cooldown, min_lr):
    values = [1.0, 0.9, 0.9, 0.95, 0.91, 0.5, 0.5, 0.5, 0.6, 0.49, 0.49, 0.49, 0.49, 0.7]
    pipeline = one_model_pipeline()
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1)), ], lr=1.0)
    reference.add_param_group({'params': [torch.nn.Parameter(torch.zeros(1))], 'lr': 2.0})
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(reference, mode=mode, factor=factor, patience=patience,
                                                           cooldown=cooldown, min_lr=min_lr)
    callback = ReduceLROnPlateau('net', monitor='val/loss', mode=mode, factor=factor, patience=patience,
                                 cooldown=cooldown, min_lr=min_lr)
    run = FakeRun(pipeline)
    for epoch, value in enumerate(values):
        run.logs = {'val/loss': value}
        callback.on_epoch_end(run, epoch)
        scheduler.step(value)
        got = [group['lr'] for group in pipeline.m('net').optimizer.param_groups]
        assert got == [group['lr'] for group in reference.param_groups]
    assert got != [1.0, 2.0]                          # the sequence reduced the rates


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='factor'):
        ReduceLROnPlateau('net', factor=1.5)
    with pytest.raises(ValueError, match='cooldown'):
        ReduceLROnPlateau('net', cooldown=-1)


def test_a_model_the_pipeline_does_not_have_is_refused_at_run_start():
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    with pytest.raises(ValueError, match=r"model_name='nett'; the pipeline's models: \['net'\]"):
        train.run(**cases.RUN, callbacks=[ReduceLROnPlateau('nett', monitor='train/loss')])
    assert isinstance(train.m('net'), PendingModel)          # refused before the first batch built the model
    done = train.run(**cases.RUN, callbacks=[ReduceLROnPlateau('net', monitor='train/loss')])
    assert done.m('net').iteration == 15
    done.m('net').close()


@pytest.mark.parametrize('name, value', [('threshold', -1), ('min_lr', float('inf')), ('eps', float('nan'))])
def test_out_of_range_numbers_are_refused(name, value):
    with pytest.raises(ValueError, match=f'{name} as a finite number >= 0'):
        ReduceLROnPlateau('net', **{name: value})
    with pytest.raises(TypeError, match='model_name'):
        ReduceLROnPlateau(None)


def test_models_declared_by_any_action_count_and_a_named_expression_leaves_the_check_to_the_run():
    from flowpipe import C, Pipeline
    from flowpipe.callbacks.base import model_names
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    declared = Pipeline().import_model('imported', train).load_model('loaded', 'net.model') @ 0.5
    assert model_names(declared << train.dataset) == ['imported', 'loaded']
    assert model_names(Pipeline().import_model(C('which'), train) << train.dataset) is None
