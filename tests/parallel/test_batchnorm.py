"""Pins the documented BatchNorm behaviour: per-piece statistics in training, running stats averaged."""
import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

MOMENTUM = 0.1


def bn_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=MOMENTUM), nn.Linear(4, 2)).double()


def batch():
    generator = torch.Generator().manual_seed(3)
    return torch.randn(7, 3, generator=generator, dtype=torch.float64), torch.tensor([0, 1, 1, 0, 1, 0, 0])


def per_piece_step(model, inputs, targets, bounds):
    """Hand-written: each piece normalized with its own statistics, loss weighted by its share."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    optimizer.zero_grad()
    for start, stop in bounds:
        loss = F.cross_entropy(model(inputs[start:stop]), targets[start:stop]) * (stop - start) / len(inputs)
        loss.backward()
    optimizer.step()
    return model


def piece_stats(model, inputs, bounds):
    hidden = model[0](inputs).detach()
    return [(hidden[a:b].mean(0), hidden[a:b].var(0, unbiased=True)) for a, b in bounds]


def train(model, plan, inputs, targets):
    engine = build_engine(copy.deepcopy(model), plan)
    with engine:
        engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.5))
        return engine.module, getattr(engine, 'replicas', [engine.module])


def test_replicas_normalize_each_shard_and_average_running_stats():
    model, (inputs, targets) = bn_model(), batch()
    bounds = [(0, 4), (4, 7)]                                   # shards of 7 items over 2 replicas
    trained, replicas = train(model, make_plan(['CPU:0', 'CPU:1'], num_gpus=0), inputs, targets)

    expected = per_piece_step(model, inputs, targets, bounds)
    for a, b in zip(trained.parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)
    (mean_0, var_0), (mean_1, var_1) = piece_stats(model, inputs, bounds)
    norm = trained[1]
    torch.testing.assert_close(norm.running_mean, MOMENTUM * (mean_0 + mean_1) / 2, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(norm.running_var, (1 - MOMENTUM) + MOMENTUM * (var_0 + var_1) / 2)
    assert int(norm.num_batches_tracked) == 1
    for replica in replicas:
        torch.testing.assert_close(replica[1].running_mean, norm.running_mean, rtol=0, atol=0)


def test_the_effect_differs_from_full_batch_statistics():
    model, (inputs, targets) = bn_model(), batch()
    trained, _ = train(model, make_plan(['CPU:0', 'CPU:1'], num_gpus=0), inputs, targets)
    full = per_piece_step(model, inputs, targets, [(0, 7)])
    assert not torch.allclose(trained[0].weight, full[0].weight, rtol=1e-6, atol=0)
    assert not torch.allclose(trained[1].running_mean, full[1].running_mean, rtol=1e-6, atol=0)


def test_micro_batches_update_running_stats_once_per_chunk():
    model, (inputs, targets) = bn_model(), batch()
    bounds = [(0, 4), (4, 7)]                                   # chunks of 4 items on one device
    trained, _ = train(model, make_plan('CPU:0', microbatch=4, num_gpus=0), inputs, targets)

    expected = per_piece_step(model, inputs, targets, bounds)
    for a, b in zip(trained.parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)
    (mean_0, _), (mean_1, _) = piece_stats(model, inputs, bounds)
    sequential = (1 - MOMENTUM) * MOMENTUM * mean_0 + MOMENTUM * mean_1
    torch.testing.assert_close(trained[1].running_mean, sequential, rtol=1e-12, atol=1e-14)
    assert int(trained[1].num_batches_tracked) == 2
