"""SPEC §3 through the pipeline: `train_model` and `predict_model` give the single-device, full-batch result
whatever `device` and `microbatch` say (float64, a model without batch-dependent layers)."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, C, Dataset, Pipeline, V

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

N_ITEMS, N_FEATURES, N_CLASSES = 29, 5, 3
LR = 0.1


def _dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_ITEMS, N_FEATURES))
    y = rng.integers(0, N_CLASSES, size=N_ITEMS)
    return Dataset(N_ITEMS, preloaded={'x': x, 'y': y}), x


def _network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(N_FEATURES, 7), nn.Tanh(), nn.Linear(7, N_CLASSES)).double()


def _config(network):
    return {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES,
            'initial_block/inputs': 'x', 'loss': 'ce', 'optimizer': {'name': 'SGD', 'lr': LR},
            'device': C('device'), 'microbatch': C('microbatch')}


def _reference_step(network, x, y):
    """One hand-written full-batch SGD step; returns the loss and the updated parameters."""
    network = copy.deepcopy(network)
    loss = nn.functional.cross_entropy(network(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    with torch.no_grad():
        for param in network.parameters():
            param -= LR * param.grad
    return loss.item(), [p.detach().clone() for p in network.parameters()]


DEVICES = [['CPU:0'], ['CPU:0', 'CPU:1'], ['CPU:0', 'CPU:1', 'CPU:2'], ['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3']]


@pytest.mark.parametrize('batch_size', [12, 7, 2])
@pytest.mark.parametrize('microbatch', [None, 'dividing', 'not dividing'])
@pytest.mark.parametrize('device', DEVICES, ids=len)
def test_one_train_model_step_equals_the_full_batch_step(device, microbatch, batch_size):
    microbatch = {None: None, 'dividing': batch_size // 2 or 1, 'not dividing': batch_size // 2 + 1}[microbatch]
    (dataset, _), network = _dataset(), _network()
    template = (Pipeline()
                .init_variable('loss', [])
                .init_model('dynamic', None, 'net', config=_config(copy.deepcopy(network)))
                .train_model('net', fetches='loss', x=B.x, y=B.y, save_to=V('loss', mode='a'), use_lock=True))
    pipeline = template << dataset << {'device': device, 'microbatch': microbatch}
    batch = pipeline.next_batch(batch_size, shuffle=3)

    loss, parameters = _reference_step(network, batch.x, batch.y)
    model = pipeline.m('net')
    assert pipeline.v('loss')[0] == pytest.approx(loss, rel=1e-10)
    for trained, expected in zip(model.model.parameters(), parameters):
        torch.testing.assert_close(trained.detach(), expected, rtol=1e-10, atol=1e-12)
    model.close()


@pytest.mark.parametrize('device', DEVICES[1:], ids=len)
def test_predict_model_keeps_the_batch_order(device):
    (dataset, x), network = _dataset(), _network()
    template = (Pipeline()
                .init_variable('proba', [])
                .init_model('dynamic', None, 'net', config=_config(copy.deepcopy(network)))
                .predict_model('net', x=B.x, fetches='proba', save_to=V('proba', mode='e'), use_lock=True))
    pipeline = template << dataset << {'device': device, 'microbatch': 4}
    pipeline.run(11, n_epochs=1, shuffle=False, prefetch=2)

    expected = torch.softmax(network(torch.from_numpy(x)), dim=1).detach().numpy()
    np.testing.assert_allclose(np.asarray(pipeline.v('proba')), expected, rtol=1e-10, atol=1e-12)
    pipeline.m('net').close()
