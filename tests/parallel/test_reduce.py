"""Coalesced reduction and broadcast: bit-identical to the per-tensor reference on logical CPU devices."""
import copy

import pytest
import torch
from torch import nn

from flowpipe.parallel.engines.reduce import (average_buffers, average_per_tensor, broadcast, broadcast_per_tensor,
                                              buckets, reduce_gradients, reduce_per_tensor)

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

CPU = torch.device('cpu')


def test_buckets_keep_one_dtype_and_device_and_close_at_the_limit():
    single = torch.float32
    tensors = [torch.zeros(10, dtype=single), torch.zeros(10, dtype=torch.float64), torch.zeros(20, dtype=single),
               torch.zeros(5, dtype=single), torch.zeros(3, dtype=torch.int64), torch.zeros(200, dtype=single),
               torch.zeros(1, dtype=single, device='meta')]
    assert buckets(tensors, limit=100) == [[0, 2], [1], [3, 5], [4], [6]]
    assert buckets(tensors) == [[0, 2, 3, 5], [1], [4], [6]]
    assert buckets([]) == []


def replicas(count, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 4), nn.Linear(4, 2))
    return [copy.deepcopy(model) for _ in range(count)]


def with_gradients(models, missing=()):
    """Random gradients; ``missing``: (replica, parameter index) pairs left without one."""
    generator = torch.Generator().manual_seed(1)
    for r, model in enumerate(models):
        for i, param in enumerate(model.parameters()):
            param.grad = None if (r, i) in missing else torch.randn(param.shape, generator=generator)
    return [list(model.parameters()) for model in models]


def grads(params):
    return [None if p.grad is None else p.grad.clone() for p in params]


@pytest.mark.parametrize('flatten', [False, True])
@pytest.mark.parametrize('active, missing', [
    ((0, 1), ()), ((0, 1, 2, 3), ()), ((0, 2), ((2, 1), (0, 3))), ((1, 2), ()), ((0, 1, 2), ((0, 0), (1, 0), (2, 0))),
    ((0, 1, 2, 3), ((1, 4), (3, 4), (0, 5))), ((0,), ())])
def test_reduction_equals_the_per_tensor_reference_bit_for_bit(flatten, active, missing):
    if 0 not in active:             # an idle primary has no gradients (the engine clears them before a batch)
        missing = {(0, i) for i in range(8)}
    expected = with_gradients(replicas(4), missing)
    reduce_per_tensor(expected, active)
    actual = with_gradients(replicas(4), missing)
    others = [grads(params) for params in actual[1:]]
    reduce_gradients(actual, active, [CPU] * 4, flatten=flatten)
    for a, b in zip(grads(actual[0]), grads(expected[0])):
        assert (a is None and b is None) or torch.equal(a, b)
    for params, before in zip(actual[1:], others):        # the other replicas' gradients are left alone
        for a, b in zip(grads(params), before):
            assert (a is None and b is None) or torch.equal(a, b)


def test_a_parameter_without_gradients_anywhere_keeps_none():
    params = with_gradients(replicas(2), missing={(0, 2), (1, 2)})
    reduce_gradients(params, (0, 1), [CPU, CPU])
    assert params[0][2].grad is None and params[0][0].grad is not None


def test_a_summed_gradient_keeps_its_parameter_layout():
    models = replicas(2)
    for model in models:
        model.to(memory_format=torch.channels_last)
    params = with_gradients(models)
    for param in (p for model in models for p in model.parameters() if p.dim() == 4):
        param.grad = param.grad.contiguous(memory_format=torch.channels_last)
    expected = [p.grad + q.grad for p, q in zip(*params)]
    reduce_gradients(params, (0, 1), [CPU, CPU], flatten=True)
    conv = params[0][0]
    assert conv.grad.stride() == conv.stride() and conv.is_contiguous(memory_format=torch.channels_last)
    assert all(torch.equal(p.grad, e) for p, e in zip(params[0], expected))


def trained_buffers(models):
    generator = torch.Generator().manual_seed(2)
    for model in models:
        model.train()
        model(torch.randn(4, 3, 3, 3, generator=generator))
    return [list(model.buffers()) for model in models]


@pytest.mark.parametrize('flatten', [False, True])
@pytest.mark.parametrize('active', [(0, 1), (0, 1, 2), (1, 2), (2,), (0,)])
def test_buffer_averages_equal_the_per_tensor_reference(flatten, active):
    expected, actual = trained_buffers(replicas(3)), trained_buffers(replicas(3))
    expected[1][2].fill_(7)                 # num_batches_tracked differs: taken from the first active replica
    actual[1][2].fill_(7)
    average_per_tensor(expected, active)
    average_buffers(actual, active, flatten=flatten)
    assert all(torch.equal(a, b) for a, b in zip(actual[0], expected[0]))


@pytest.mark.parametrize('flatten', [False, True])
def test_broadcast_equals_the_per_tensor_reference(flatten):
    models = replicas(3, seed=0)
    for model in models[1:]:
        for param in model.parameters():
            param.data.normal_()
    models[2].to(memory_format=torch.channels_last)
    state = [list(model.parameters()) + list(model.buffers()) for model in models]
    broadcast(state, [CPU] * 3, flatten=flatten)
    for tensors in state[1:]:
        assert all(torch.equal(a, b) for a, b in zip(tensors, state[0]))
    assert models[2][0].weight.is_contiguous(memory_format=torch.channels_last)      # copied into, not replaced
    broadcast_per_tensor(state)
    broadcast(state[:1], [CPU])                                                     # one replica: nothing to do
