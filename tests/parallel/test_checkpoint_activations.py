"""Activation checkpointing ('checkpoint_activations'): the same losses, gradients, parameters and buffers bit for bit
as without it, on every layout of one process and on 2 gloo ranks, dropout and BatchNorm inside the recomputed
module included; what it keeps for backward; its errors; saving and loading."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.models.torch import SimpleCNN, TorchModel, checkpointing, io
from flowpipe.models.torch.checkpointing import CheckpointedForward
from flowpipe.parallel import launch

from ..execution.checkpoint_cases import RUN, TRIGGER, outcome, pipeline
from . import checkpoint_jobs
from .dist_jobs import N_CLASSES, N_FEATURES

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

BATCH = 32


def _batch(seed=1):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, N_FEATURES, generator=generator, dtype=torch.float64)
    y = torch.randint(0, N_CLASSES, (BATCH,), generator=generator)
    y[:5] = 0                                       # the ignored label of the ignore_index loss below
    return x, y


def _model(checkpoint, loss='ce', **config):
    return TorchModel({'model': checkpoint_jobs.network(), 'inputs/x/shape': (N_FEATURES,),
                       'inputs/y/classes': N_CLASSES, 'loss': loss, 'optimizer': 'Adam',
                       'checkpoint_activations': checkpoint, **config})


def _train(checkpoint, steps=3, loss='ce', **config):
    """Losses, then every parameter, gradient and buffer after ``steps`` seeded steps."""
    model = _model(checkpoint, loss, **config)
    x, y = _batch()
    losses = [model.train(x=x, y=y, fetches='loss', seed=step) for step in range(steps)]
    tensors = [*model.model.parameters(), *(p.grad for p in model.model.parameters()), *model.model.buffers()]
    model.close()
    return losses, [t.detach().clone() for t in tensors]


def _assert_same_bits(run, expected):
    assert run[0] == expected[0]
    assert len(run[1]) == len(expected[1])
    for got, want in zip(run[1], expected[1]):
        assert torch.equal(got, want)


LAYOUTS = {
    'one device': {},
    'micro-batches': {'microbatch': 10},
    'replicas': {'device': ['CPU:0', 'CPU:1']},
    'replicas on one device, micro-batches': {'device': 'CPU:0x2', 'microbatch': 16},
    'model parallel, micro-batches': {'device_map': {'stem': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'},
                                      'microbatch': 10},
    'torch randomness, micro-batches': {'randomness': 'torch', 'microbatch': 10},
}
LOSSES = {'mean': 'ce', 'sum': nn.CrossEntropyLoss(reduction='sum'), 'ignore_index': nn.CrossEntropyLoss(ignore_index=0)}


@pytest.mark.parametrize('layout', list(LAYOUTS))
@pytest.mark.parametrize('loss', list(LOSSES))
def test_checkpointed_training_is_bit_for_bit_the_plain_one(layout, loss):
    expected = _train(None, loss=LOSSES[loss], **LAYOUTS[layout])
    _assert_same_bits(_train(['body'], loss=LOSSES[loss], **LAYOUTS[layout]), expected)


@pytest.mark.parametrize('checkpoint', [True, 'body', ['stem', 'body.2'], ['body.6', 'head']])
def test_every_form_of_the_key_trains_the_same_bits(checkpoint):
    _assert_same_bits(_train(checkpoint, microbatch=10), _train(None, microbatch=10))


def test_the_recomputed_dropout_and_batchnorm_are_the_first_forward_s():
    """Without the replayed masks and the put-back buffers, the step would differ: a checkpointed forward whose
    recomputation counts new dropout calls and updates BatchNorm again trains another model."""
    expected = _train(None)
    original = CheckpointedForward._contexts
    try:
        CheckpointedForward._contexts = lambda self: torch.utils.checkpoint.noop_context_fn()
        bare = _train(['body'])
    finally:
        CheckpointedForward._contexts = original
    assert not all(torch.equal(a, b) for a, b in zip(bare[1], expected[1]))
    _assert_same_bits(_train(['body']), expected)


def test_true_names_the_top_level_children_that_hold_parameters_and_the_plan_says_so():
    network = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 2))
    assert checkpointing.checkpointed_names(network, True) == ('0', '3')
    model = _model(True)
    assert model.checkpointed == ('stem', 'body', 'head')
    assert isinstance(vars(model.model.body)['forward'], CheckpointedForward)
    assert 'activations checkpointed: stem, body, head' in model.device_plan(BATCH)
    assert 'activations checkpointed' not in _model(None).device_plan(BATCH)
    model.close()


def _saved_bytes(model, x, y):
    """Bytes autograd keeps for backward outside the recomputed modules during a training step."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.train(x=x, y=y, seed=0)
    return total


def test_checkpointing_keeps_less_for_backward():
    x, y = _batch()
    assert _saved_bytes(_model(['body']), x, y) < _saved_bytes(_model(None), x, y)


def test_predictions_do_not_checkpoint_and_equal_the_plain_model_s(monkeypatch):
    calls = []
    original = checkpointing.checkpoint
    monkeypatch.setattr(checkpointing, 'checkpoint', lambda *args, **kwargs: calls.append(1) or original(
        *args, **kwargs))
    x, y = _batch()
    model, plain = _model(['body']), _model(None)
    np.testing.assert_array_equal(model.predict(x=x), plain.predict(x=x))
    assert calls == []
    model.train(x=x, y=y)
    assert calls == [1]


def test_a_saved_model_carries_no_wrapping_and_loads_checkpointed(tmp_path):
    x, y = _batch()
    model = _model(['body'])
    model.train(x=x, y=y, seed=0)
    model.save(tmp_path / 'model.flowpipe')
    loaded = TorchModel.from_file(tmp_path / 'model.flowpipe')
    assert loaded.checkpointed == ('body',)
    assert isinstance(vars(loaded.model.body)['forward'], CheckpointedForward)
    np.testing.assert_array_equal(loaded.predict(x=x), model.predict(x=x))
    stored = io.read(tmp_path / 'model.flowpipe')['module']
    assert not any(isinstance(vars(module).get('forward'), CheckpointedForward) for module in stored.modules())
    assert loaded.train(x=x, y=y, seed=1, fetches='loss') == model.train(x=x, y=y, seed=1, fetches='loss')


def test_a_model_without_the_key_unwraps_a_network_another_model_wrapped():
    network = checkpoint_jobs.network()
    config = {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES}
    TorchModel({**config, 'checkpoint_activations': ['body']})
    assert 'forward' in vars(network.body)
    assert TorchModel(config).checkpointed == ()
    assert 'forward' not in vars(network.body)


@pytest.mark.parametrize('value, match', [
    (['encoder'], r"Received: 'encoder'.*\['stem', 'body', 'head'\].*dots \('body.0'\).*True"),
    (['body.9'], r"Received: 'body.9'"),
    ([''], r"the network itself"),
    (['body.1'], r"a dropout module.*Name the module that holds it"),
    (['body', 'body.2'], r"do not hold one another. Received: 'body' and 'body.2'"),
    (['head', 'head'], r"do not hold one another"),
])
def test_bad_names_say_what_is_there_and_the_fix(value, match):
    with pytest.raises(ValueError, match=match):
        _model(value)


@pytest.mark.parametrize('value', [5, ['body', 1], {'body': True}])
def test_a_value_of_the_wrong_type_is_a_type_error(value):
    with pytest.raises(TypeError, match=r"Expected 'checkpoint_activations' as True.*Received"):
        _model(value)


def test_compile_with_checkpointing_is_refused():
    with pytest.raises(ValueError, match=r"without 'compile'.*Drop one of them"):
        _model(['body'], compile=True)


def test_a_model_built_at_its_first_step_names_the_value_then_the_modules():
    model = SimpleCNN({'inputs/labels/classes': 10, 'checkpoint_activations': True})
    assert model.engine is None
    assert "checkpoint_activations True: resolved when the network is built" in model.device_plan(4)
    model.train(images=np.zeros((4, 1, 8, 8), 'float32'), labels=np.zeros(4, 'int64'))
    assert model.checkpointed and f"activations checkpointed: {', '.join(model.checkpointed)}" in model.device_plan(4)


@pytest.mark.gpu
@pytest.mark.parametrize('layout', [{'device': 'cuda'}, {'device': 'GPU:0x2', 'microbatch': 16},
                                    {'device': 'cuda', 'randomness': 'torch'}])
def test_on_a_gpu_the_recomputation_on_autograd_s_device_thread_draws_the_same(layout):
    """On a GPU backward, and so the recomputation, runs on autograd's thread for the device, not the step's."""
    expected, run = _train(None, **layout), _train(['body'], **layout)
    assert run[0] == pytest.approx(expected[0], rel=1e-10)
    for got, want in zip(run[1], expected[1]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def _assert_same_ranks(ranks, checkpointed):
    for result in ranks:
        assert result['checkpointed']['calls'] > 0
        assert result['plain']['loss'] == result['checkpointed']['loss']
        for a, b in zip(result['checkpointed']['params'], result['plain']['params']):
            np.testing.assert_array_equal(a, b)
        assert f'activations checkpointed: {checkpointed}' in result['checkpointed']['plan']


@pytest.mark.slow
def test_two_ranks_train_the_same_bits_with_and_without_checkpointing():
    ranks = launch(checkpoint_jobs.scenarios, 2, timeout=300)
    _assert_same_ranks(ranks, 'body')
    one = checkpoint_jobs.train(None, microbatch=3)
    for result in ranks:
        for a, b in zip(result['checkpointed']['params'], one['params']):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_two_sharded_ranks_train_the_same_bits_with_and_without_checkpointing():
    _assert_same_ranks(launch(checkpoint_jobs.sharded_scenarios, 2, timeout=300), 'body')


@pytest.mark.slow
def test_two_pipeline_stages_train_and_predict_the_same_bits_with_and_without_checkpointing():
    ranks = launch(checkpoint_jobs.pipelined_scenarios, 2, timeout=300)
    _assert_same_ranks(ranks, '0, 2, 4')
    for result in ranks:
        np.testing.assert_array_equal(result['checkpointed']['predictions'], result['plain']['predictions'])


@pytest.mark.parametrize('written, resumed', [(None, True), (True, None)])
def test_a_run_resumes_with_checkpointing_switched_and_ends_with_the_same_bits(tmp_path, written, resumed):
    """It changes no result, so a resumed run may switch it (to fit a smaller device), with a warning."""
    make = {'dtype': torch.float64}
    reference = outcome(pipeline(**make).run(**RUN))
    TRIGGER.update(at=7, error=RuntimeError('batch 7'), where='first')
    try:
        with pytest.raises(RuntimeError, match='batch 7'):
            pipeline(**make, checkpoint_activations=written).run(**RUN, checkpoint=tmp_path)
    finally:
        TRIGGER.update(at=None, error=None)
    with pytest.warns(UserWarning, match=r"model 'net' checkpoint_activations: .* the new value applies"):
        done = pipeline(**make, checkpoint_activations=resumed).run(**RUN, checkpoint=tmp_path, resume=True)
    assert done.m('net').checkpointed == (() if resumed is None else ('0', '3'))
    got = outcome(done)
    assert got['loss'] == reference['loss']
    for a, b in zip(got['parameters'], reference['parameters']):
        assert torch.equal(a, b)
