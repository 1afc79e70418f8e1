"""TorchModel: inputs by name or position, fetches, dtypes, devices, errors."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.models.torch import MLP, VGG7, ResNet34, SimpleCNN, TorchModel

CONFIG = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (16,)}


def _data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype('float32')
    return x, (x[:, 0] > 0).astype('int64') + (x[:, 1] > 1)


def _model(cls=MLP, **overrides):
    torch.manual_seed(0)
    return cls({**CONFIG, **overrides})


def test_training_lowers_the_loss():
    model, (x, y) = _model(optimizer={'name': 'Adam', 'lr': 0.05}), _data()
    losses = [model.train(x=x, y=y, fetches='loss') for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    assert model.iteration == 30


def test_named_positional_and_inputs_targets_forms_agree():
    x, y = _data()
    results = [_model().train(x=x, y=y, fetches='loss'), _model().train(x, y, fetches='loss'),
               _model().train(inputs=x, targets=y, fetches='loss'),
               _model().train(inputs=torch.from_numpy(x), targets=[torch.from_numpy(y)], fetches='loss')]
    assert len(set(results)) == 1


def test_fetches_come_back_in_order_as_numpy_and_floats():
    model, (x, y) = _model(), _data()
    loss, predictions, proba, labels = model.train(x=x, y=y, fetches=['loss', 'predictions', 'proba', 'labels'])
    assert isinstance(loss, float) and predictions.shape == (24, 3) and isinstance(predictions, np.ndarray)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-5)
    np.testing.assert_array_equal(labels, predictions.argmax(axis=1))
    assert isinstance(model.predict(x=x, fetches=('labels',)), tuple)
    assert model.train(x=x, y=y) is None


def test_predict_does_not_train_and_can_fetch_the_loss():
    model, (x, y) = _model(), _data()
    before = [p.clone() for p in model.model.parameters()]
    first = model.predict(x=x)
    loss = model.predict(x=x, y=y, fetches='loss')
    np.testing.assert_array_equal(first, model.predict(x))
    assert all(torch.equal(a, b) for a, b in zip(before, model.model.parameters()))
    expected = nn.functional.cross_entropy(torch.from_numpy(first), torch.from_numpy(y))
    assert loss == pytest.approx(float(expected), rel=1e-6)


def test_float64_model_trains_in_float64_and_integer_labels_stay_integer():
    model, (x, y) = _model(dtype='float64'), _data()
    predictions = model.train(x=x, y=y.astype('int32'), fetches='predictions')
    assert predictions.dtype == np.float64
    assert next(model.model.parameters()).dtype == torch.float64


def test_ready_module_under_model_key_is_the_primary_module():
    network = nn.Sequential(nn.Linear(4, 3))
    model = TorchModel({'model': network, 'loss': 'ce', 'optimizer': {'name': 'SGD', 'lr': 0.1}})
    x, y = _data()
    assert model.model is network
    assert isinstance(model.train(x, y, fetches='loss'), float)


def test_regression_with_mse_and_float_targets():
    torch.manual_seed(0)
    model = MLP({'inputs/x/shape': (4,), 'inputs/t/shape': (1,), 'initial_block/inputs': 'x', 'loss': 'mse'})
    x, _ = _data()
    assert model.train(x=x, t=x[:, :1].astype('float64'), fetches='predictions').shape == (24, 1)


def test_replicas_and_microbatches_match_one_device_in_float64():
    x, y = _data(25)
    single, multi = _model(dtype='float64'), _model(dtype='float64', device=['CPU:0', 'CPU:1'], microbatch=7)
    for _ in range(3):
        assert single.train(x=x, y=y, fetches='loss') == pytest.approx(multi.train(x=x, y=y, fetches='loss'),
                                                                       rel=1e-10)
    for a, b in zip(single.model.parameters(), multi.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    multi.close()


def test_repr_shows_network_inputs_and_device_plan():
    with _model(device=['CPU:0', 'CPU:1'], microbatch=8) as model:
        x, y = _data()
        model.train(x=x, y=y)
        text = repr(model)
    assert 'MLP' in text and "x (4,)" in text and '3 classes' in text
    assert 'replicas' in text and 'batch 24' in text
    assert all(line.strip() in text for line in model.device_plan(24).splitlines())


def test_repr_counts_batches_in_singular_and_plural():
    model, (x, y) = _model(), _data()
    assert 'trained on 0 batches' in repr(model)
    model.train(x=x, y=y)
    assert 'trained on 1 batch' in repr(model) and '1 batches' not in repr(model)
    model.train(x=x, y=y)
    assert 'trained on 2 batches' in repr(model)


def test_decay_changes_the_learning_rate_per_batch():
    model, (x, y) = _model(optimizer={'name': 'SGD', 'lr': 1.0}, decay={'name': 'exp', 'gamma': 0.5}), _data()
    model.train(x=x, y=y)
    model.train(x=x, y=y)
    assert model.optimizer.param_groups[0]['lr'] == 0.25


def test_wrong_input_name_suggests_declared_names():
    x, y = _data()
    with pytest.raises(ValueError, match=r"'xx'.*Did you mean \['x'\]"):
        _model().train(xx=x, y=y)


def test_missing_inputs_and_targets_are_named():
    x, y = _data()
    with pytest.raises(ValueError, match=r"the network inputs \['x'\]"):
        _model().train(y=y)
    with pytest.raises(ValueError, match=r"targets for training or a loss \['y'\]"):
        _model().train(x=x)
    with pytest.raises(ValueError, match='at most 2 positional'):
        _model().train(x, y, y)


def test_unknown_fetch_and_bad_input_type():
    x, y = _data()
    with pytest.raises(ValueError, match="Did you mean 'proba'"):
        _model().train(x=x, y=y, fetches='probs')
    with pytest.raises(TypeError, match="'x'.*object array"):
        _model().train(x=np.array([np.zeros(4), np.zeros(3)], dtype=object), y=y[:2])


def test_unknown_loss_and_no_network_errors():
    with pytest.raises(ValueError, match="Did you mean"):
        _model(loss='crossentropyy')
    with pytest.raises(ValueError, match="'model'"):
        TorchModel(CONFIG)
    with pytest.raises(ValueError, match='dtype'):
        _model(dtype='float99')


@pytest.mark.parametrize('cls, options, check', [
    (MLP, {'body/units': (7,)}, lambda net: net.head.in_features == 7),
    (SimpleCNN, {'body/filters': (3, 5), 'batch_norm': False},
     lambda net: net.head[-1].in_features == 5 and not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())),
    (VGG7, {'body/filters': (4, 6), 'body/repeats': (1, 1)}, lambda net: len(net.body) == 3),
    (ResNet34, {'body/filters': (4, 8, 8, 8), 'initial_block/filters': 4, 'head/dropout': 0.5},
     lambda net: net.initial_block[0].out_channels == 4 and isinstance(net.head[2], nn.Dropout)),
])
def test_ready_networks_read_their_options_from_the_config(cls, options, check):
    model = cls({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 3, **options})
    assert check(model.model)
    assert model.train(images=np.zeros((4, 1, 8, 8), 'float32'), labels=[0, 1, 2, 0], fetches='loss') > 0


def test_model_parallel_device_map_addresses_named_parts():
    torch.manual_seed(0)
    config = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 3, 'body/filters': (4, 8)}
    parts = SimpleCNN({**config, 'device_map': {'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'}})
    assert 'model parallel' in repr(parts)
    images, labels = np.random.default_rng(0).normal(size=(6, 1, 8, 8)).astype('float32'), [0, 1, 2, 0, 1, 2]
    assert parts.predict(images=images).shape == (6, 3)
    assert isinstance(parts.train(images=images, labels=labels, fetches='loss'), float)


def test_close_stops_replica_workers():
    model = _model(device=['CPU:0', 'CPU:1'])
    model.close()
    with pytest.raises(RuntimeError, match='after close'):
        model.predict(x=_data()[0])


def test_a_failing_step_on_replicas_leaves_no_worker_thread_and_the_model_trains_on():
    model, (x, y) = _model(device=['CPU:0', 'CPU:1', 'CPU:2']), _data()
    workers = model.engine._workers.threads
    def fail(outputs, targets):
        raise RuntimeError('loss failed')       # on every replica
    loss_fn, model.loss_fn = model.loss_fn, fail
    with pytest.raises(RuntimeError, match='loss failed'):
        model.train(x=x, y=y)
    model.loss_fn = loss_fn
    assert not any(thread.is_alive() for thread in workers)
    assert isinstance(model.train(x=x, y=y, fetches='loss'), float)
    model.close()


def test_clip_grad_norm_clips_the_full_batch_gradient_whatever_the_devices():
    x, y = _data(25)
    clip = {'dtype': 'float64', 'clip_grad_norm': 0.05, 'optimizer': {'name': 'SGD', 'lr': 0.5}}
    single, multi = _model(**clip), _model(**clip, device=['CPU:0', 'CPU:1'], microbatch=7)
    free = _model(**{**clip, 'clip_grad_norm': None})
    for _ in range(3):
        assert single.train(x=x, y=y, fetches='loss') == pytest.approx(multi.train(x=x, y=y, fetches='loss'),
                                                                       rel=1e-10)
        free.train(x=x, y=y)
    for a, b in zip(single.model.parameters(), multi.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(single.model.head.weight, free.model.head.weight)
    assert single.clip_grad_norm == 0.05 and 'clip_grad_norm=0.05' in repr(single)
    assert free.clip_grad_norm is None and 'clip_grad_norm' not in repr(free)
    multi.close()


@pytest.mark.parametrize('config, error, match', [
    ({'clip_grad_norm': 0}, ValueError, r'positive number .* Received: clip_grad_norm=0\. Use None'),
    ({'clip_grad_norm': '1.0'}, TypeError, r"positive number .* Received: '1.0' of type str"),
    ({'clip_grad_nrom': 1.0}, ValueError, r"'clip_grad_nrom'. Did you mean \['clip_grad_norm'"),
])
def test_bad_clip_grad_norm_is_an_error_when_the_model_is_built(config, error, match):
    with pytest.raises(error, match=match):
        _model(**config)


def test_the_plan_is_known_before_the_network_is_built():
    model = SimpleCNN({'inputs/labels/classes': 10, 'device': ['CPU:0', 'CPU:1'], 'microbatch': 8})
    assert model.engine is None and model.plan.num_replicas == 2
    text = model.device_plan(20)
    assert 'chunk sizes [8, 8, 4]' in text and 'network not built yet' in text
    assert '2 replicas' in repr(model)
    model.train(images=np.zeros((20, 1, 8, 8), 'float32'), labels=np.zeros(20, 'int64'))
    assert 'not built' not in model.device_plan(20)
    model.close()


def test_resnet_depth_from_config():
    from flowpipe.models.torch import ResNet
    config = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
              'body/filters': (4, 8), 'initial_block/filters': 4}
    shallow = ResNet({**config, 'body/layers': (1, 1)})
    deep = ResNet({**config, 'body/layers': (2, 3)})
    assert len(shallow.model.body) == 2 and len(deep.model.body) == 5
    with pytest.raises(ValueError, match='as many stage widths'):
        ResNet({**config, 'body/layers': (1, 1, 1)})
