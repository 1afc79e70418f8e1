"""Per-piece random streams: dropout in replica threads gives the same masks whatever the thread timing (under
'randomness': 'torch' and 'by_item'; what 'by_item' adds is in test_item_random.py)."""
import copy
import random
import time

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, V, Dataset, Pipeline
from flowpipe.parallel import build_engine, make_plan
from flowpipe.parallel.randomness import draw_step_seed, piece_random, piece_seed

CPU = torch.device('cpu')


class Jitter(nn.Module):
    """Sleeps a random while in the forward, so replica threads interleave differently from run to run."""

    def forward(self, x):
        time.sleep(random.random() * 0.002)
        return x


def dropout_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), Jitter(), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3)).double()


def train(devices, microbatch, seeds, net=None, randomness=None):
    engine = build_engine(copy.deepcopy(net or dropout_net()),
                          make_plan(devices, microbatch=microbatch, randomness=randomness))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for seed in seeds:
        inputs = torch.randn(16, 6, generator=generator, dtype=torch.float64)
        targets = torch.randint(0, 3, (16,), generator=generator)
        losses.append(float(engine.train_step([inputs], [targets], F.cross_entropy, optimizer, seed=seed).loss))
    parameters = [p.detach().clone() for p in engine.module.parameters()]
    engine.close()
    return losses, parameters


def same(first, second):
    return first[0] == second[0] and all(torch.equal(a, b) for a, b in zip(first[1], second[1]))


def test_piece_seeds_differ_by_step_chunk_and_start():
    seeds = {piece_seed(step, chunk, start) for step in (0, 1, 2 ** 62) for chunk in range(3) for start in (0, 4, 8)}
    assert len(seeds) == 27
    assert all(0 <= seed < 2 ** 63 for seed in seeds)
    assert piece_seed(7, 1, 4) == piece_seed(7, 1, 4)


def test_piece_random_seeds_the_block_and_restores_the_global_generator():
    torch.manual_seed(3)
    expected_after = torch.rand(4)
    torch.manual_seed(3)
    with piece_random(CPU, 11):
        inside = torch.rand(4)
    assert torch.equal(torch.rand(4), expected_after)      # the global stream goes on as if nothing happened
    assert torch.equal(inside, torch.rand(4, generator=torch.Generator().manual_seed(11)))
    with piece_random(CPU, None):                            # no seed: the block runs as it is
        pass


def test_draw_step_seed_follows_torch_manual_seed():
    torch.manual_seed(5)
    first = [draw_step_seed() for _ in range(3)]
    torch.manual_seed(5)
    assert [draw_step_seed() for _ in range(3)] == first and len(set(first)) == 3


@pytest.mark.parametrize('randomness', ['torch', 'by_item'])
@pytest.mark.parametrize('devices, microbatch', [(['CPU:0', 'CPU:1'], 4), (['CPU:0', 'CPU:1', 'CPU:2'], None),
                                                 ('cpu', 4)])
def test_replica_dropout_is_reproducible_with_given_seeds(devices, microbatch, randomness):
    first = train(devices, microbatch, seeds=range(6), randomness=randomness)
    second = train(devices, microbatch, seeds=range(6), randomness=randomness)
    assert same(first, second)
    assert not same(first, train(devices, microbatch, seeds=range(1, 7), randomness=randomness))


@pytest.mark.parametrize('randomness', ['torch', 'by_item'])
def test_replica_dropout_is_reproducible_from_torch_manual_seed(randomness):
    runs = []
    for _ in range(2):
        net = dropout_net()
        torch.manual_seed(42)
        runs.append(train(['CPU:0', 'CPU:1'], 4, seeds=[None] * 6, net=net, randomness=randomness))
    assert same(*runs)


def test_the_masks_are_those_of_the_piece_seeds():
    """One piece on one device under 'randomness': 'torch': the step's dropout mask is the one drawn from
    ``piece_seed(seed, 0, 0)``."""
    net = nn.Sequential(nn.Dropout(0.5)).double()
    net.register_parameter('scale', nn.Parameter(torch.ones((), dtype=torch.float64)))
    engine = build_engine(net, make_plan('cpu', randomness='torch'))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.0)
    inputs = torch.ones(8, 5, dtype=torch.float64)
    result = engine.train_step([inputs], [inputs], lambda out, target: (out * 0).sum() * net.scale, optimizer,
                               seed=9, return_outputs=True)
    with piece_random(CPU, piece_seed(9, 0, 0)):
        expected = F.dropout(inputs, 0.5, training=True)
    assert torch.equal(result.outputs, expected)


def _pipeline_run(prefetch, **seeds):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    dataset = Dataset(48, preloaded={'x': rng.normal(size=(48, 6)), 'y': rng.integers(0, 3, 48)})
    config = {'model': dropout_net(), 'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x',
              'loss': 'ce', 'device': ['CPU:0', 'CPU:1'], 'microbatch': 4}
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset
    pipeline.run(12, n_epochs=2, prefetch=prefetch, **seeds)
    model = pipeline.m('net')
    parameters = [p.detach().clone() for p in model.model.parameters()]
    model.close()
    return pipeline.v('loss'), parameters


@pytest.mark.parametrize('seeds', [{'shuffle': 3}, {'seed': 8}, {}], ids=['shuffle', 'seed', 'manual_seed'])
def test_a_pipeline_with_replicas_and_dropout_repeats_bit_for_bit(seeds):
    reference = _pipeline_run(0, **seeds)
    assert same(reference, _pipeline_run(0, **seeds))
    assert same(reference, _pipeline_run(4, **seeds))


@pytest.mark.gpu
@pytest.mark.parametrize('devices', ['GPU:0x2', 'GPU:*'], ids=['one_gpu_twice', 'every_gpu'])
def test_gpu_replica_dropout_is_reproducible(devices):
    """CUDA pieces draw from their device's generator, seeded per piece: two runs give the same parameters."""
    first = train(devices, 4, seeds=range(4))
    assert same(first, train(devices, 4, seeds=range(4)))
    assert not same(first, train(devices, 4, seeds=range(1, 5)))
