"""The clipping keys: clip_grad_value, clip_grad_norm and batchflow's gradient_clipping, on the full-batch gradient."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.models.torch import MLP, TorchModel

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

CONFIG = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (16,),
          'dtype': 'float64', 'optimizer': {'name': 'SGD', 'lr': 0.5}}


def _data(n=25, seed=0):
    rng = np.random.default_rng(seed)
    x = (3 * rng.normal(size=(n, 4))).astype('float32')
    return x, (x[:, 0] > 0).astype('int64') + (x[:, 1] > 1)


def _model(cls=MLP, **overrides):
    torch.manual_seed(0)
    return cls({**CONFIG, **overrides})


def _by_hand(clip_value=None, max_norm=None, fn=None):
    """One SGD step of a linear model, its full-batch gradient clipped by hand; returns (model, expected weight)."""
    torch.manual_seed(0)
    network = nn.Linear(4, 3).double()
    weight, bias = network.weight.detach().clone(), network.bias.detach().clone()
    x, y = _data()
    inputs = torch.from_numpy(x).double()
    # the gradient of the mean cross-entropy: softmax minus one-hot, averaged, times the inputs
    delta = (torch.softmax(inputs @ weight.T + bias, dim=1) - nn.functional.one_hot(torch.from_numpy(y), 3)) / len(y)
    grads = [delta.T @ inputs, delta.sum(0)]
    if fn is not None:
        grads = [fn(grad) for grad in grads]
    if clip_value is not None:
        grads = [grad.clamp(-clip_value, clip_value) for grad in grads]
    if max_norm is not None:
        norm = torch.sqrt(sum((grad ** 2).sum() for grad in grads))
        grads = [grad * min(1.0, max_norm / (float(norm) + 1e-6)) for grad in grads]
    model = TorchModel({**CONFIG, 'model': network, 'loss': 'ce'})
    return model, weight - 0.5 * grads[0]


@pytest.mark.parametrize('config, clip', [
    ({'clip_grad_value': 0.02}, {'clip_value': 0.02}),
    ({'gradient_clipping': 0.02}, {'clip_value': 0.02}),
    ({'clip_grad_value': 0.02, 'clip_grad_norm': 0.03}, {'clip_value': 0.02, 'max_norm': 0.03}),
    ({'gradient_clipping': lambda grad: grad * 0.5}, {'fn': lambda grad: grad * 0.5}),
])
def test_value_clipping_matches_a_hand_computation(config, clip):
    model, expected = _by_hand(**clip)
    unclipped, free = _by_hand()
    for key, value in config.items():
        setattr(model, key if key != 'gradient_clipping' else 'clip_grad_value', value)
    model.train(*_data())
    torch.testing.assert_close(model.model.weight.detach(), expected, rtol=1e-10, atol=1e-12)
    unclipped.train(*_data())
    assert not torch.allclose(unclipped.model.weight.detach(), expected)     # the clipping changed the step
    torch.testing.assert_close(unclipped.model.weight.detach(), free, rtol=1e-10, atol=1e-12)


def test_the_config_keys_reach_the_step():
    x, y = _data()
    for config in ({'clip_grad_value': 0.02}, {'gradient_clipping': 0.02}):
        model, expected = _by_hand(clip_value=0.02)
        torch.manual_seed(0)
        network = nn.Linear(4, 3).double()
        keyed = TorchModel({**CONFIG, 'model': network, 'loss': 'ce', **config})
        keyed.train(x, y)
        torch.testing.assert_close(keyed.model.weight.detach(), expected, rtol=1e-10, atol=1e-12)
        assert keyed.clip_grad_value == 0.02 and 'clip_grad_value=0.02' in repr(keyed)


def test_clip_grad_value_is_the_same_whatever_the_devices_and_micro_batches():
    x, y = _data()
    clip = {'clip_grad_value': 0.01}
    single, multi = _model(**clip), _model(**clip, device=['CPU:0', 'CPU:1'], microbatch=7)
    free = _model()
    for _ in range(3):
        assert single.train(x=x, y=y, fetches='loss') == pytest.approx(multi.train(x=x, y=y, fetches='loss'),
                                                                       rel=1e-10)
        free.train(x=x, y=y)
    for a, b in zip(single.model.parameters(), multi.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(single.model.head.weight, free.model.head.weight)
    multi.close()


def test_gradient_clipping_callable_is_the_same_whatever_the_split():
    x, y = _data()
    clip = {'gradient_clipping': torch.tanh}
    single, multi = _model(**clip), _model(**clip, device=['CPU:0', 'CPU:1'], microbatch=7)
    free = _model()
    for _ in range(2):
        single.train(x=x, y=y)
        multi.train(x=x, y=y)
        free.train(x=x, y=y)
    assert not torch.allclose(single.model.head.weight, free.model.head.weight)     # the callable was applied
    for a, b in zip(single.model.parameters(), multi.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    multi.close()


@pytest.mark.parametrize('config, error, match', [
    ({'clip_grad_value': -1}, ValueError, r'clip_grad_value as a positive number .* Received: clip_grad_value=-1\. '
                                          r'Use None'),
    ({'clip_grad_value': '1'}, TypeError, r"clip_grad_value as a positive number .* Received: '1' of type str"),
    ({'gradient_clipping': 0}, ValueError, r'gradient_clipping as a positive number .* gradient_clipping=0'),
    ({'gradient_clipping': 0.1, 'clip_grad_value': 0.2}, ValueError,
     r"clip_grad_value or gradient_clipping .* not both.*Keep clip_grad_value"),
])
def test_bad_clipping_values_name_the_key_and_the_fix(config, error, match):
    with pytest.raises(error, match=match):
        _model(**config)


def test_gradient_clipping_is_read_not_warned_about(recwarn):
    _model(gradient_clipping=1.0, clip_grad_value=1.0)
    assert not [w for w in recwarn if 'gradient_clipping' in str(w.message)]
