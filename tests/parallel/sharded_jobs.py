"""Functions the sharding tests run in every rank (``flowpipe.parallel.launch``) and in one process alone.

Each returns plain data: the full parameters (a sharded rank gathers its ``DTensor`` shards), the losses and the
model's description, so a test compares a launched job's ranks with one process on the whole batch.
"""
import torch

from flowpipe import B, Pipeline, V
from flowpipe.models.torch.networks import MLPNetwork
from flowpipe.parallel import distributed

from .dist_jobs import N_CLASSES, N_FEATURES, dataset


def config(sharding=None, microbatch=None, **overrides):
    """A float64 MLP (initial_block, two body blocks, head) trained with Adam."""
    torch.manual_seed(0)
    network = MLPNetwork((N_FEATURES,), N_CLASSES, units=(6, 4)).double()
    return {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES, 'loss': 'ce',
            'optimizer': {'name': 'Adam', 'lr': 0.05}, 'microbatch': microbatch, 'sharding': sharding, **overrides}


def full(tensor):
    """The whole tensor of a ``DTensor`` shard (an all-gather), a plain tensor as it is, as numpy."""
    gather = getattr(tensor, 'full_tensor', None)
    return (tensor if gather is None else gather()).detach().cpu().numpy().copy()


def train(batch_size, sharding=None, microbatch=None, n_epochs=2, overrides=None):
    """Train for ``n_epochs`` shuffled epochs of 23 items; the parameters, losses and the model's description."""
    pipeline = (Pipeline()
                .init_variable('loss', [])
                .init_model('net', config=config(sharding, microbatch, **(overrides or {})))
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset()
    pipeline.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11)
    model = pipeline.m('net')
    return {'params': [full(p) for p in model.model.parameters()], 'loss': list(pipeline.v('loss')),
            'plan': model.device_plan(batch_size), 'world': distributed.world_size()}


def scenarios(runs):
    """``train(**kwargs)`` for each ``(name, kwargs)``."""
    return {name: train(**kwargs) for name, kwargs in runs}
