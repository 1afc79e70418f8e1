"""Networks and runs the activation checkpointing tests share, in one process and in every launched rank.

``network()`` has a stem, a body with dropout by item and by feature map and BatchNorm, and a head, in float64;
``train`` runs ``dist_jobs.train`` (a seeded, shuffled pipeline run) on it, with or without checkpointing.
"""
import contextlib
from collections import OrderedDict

import torch
from torch import nn

from flowpipe.models.torch import checkpointing

from . import dist_jobs
from .dist_jobs import N_CLASSES, N_FEATURES


def network(batch_norm=True):
    """stem, body (Tanh, Dropout, Linear, Dropout1d, BatchNorm or not), head: float64, seeded."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 16), nn.Unflatten(1, (4, 4)), nn.Dropout1d(0.3),
                         nn.Flatten(), nn.BatchNorm1d(16) if batch_norm else nn.Identity(), nn.Tanh())
    return nn.Sequential(OrderedDict(stem=nn.Linear(N_FEATURES, 16), body=body,
                                     head=nn.Linear(16, N_CLASSES))).double()


def network_without_batch_norm():
    """``network()`` with an identity for its BatchNorm: ranks and one process normalize the same items."""
    return network(batch_norm=False)


def train(checkpoint=None, batch_size=16, microbatch=None, **overrides):
    """Two shuffled epochs of ``network_without_batch_norm()`` (Adam), checkpointing ``checkpoint``: the parameters,
    the losses and the plan."""
    run = dist_jobs.train(batch_size, microbatch=microbatch, overrides={
        'model': network_without_batch_norm, 'optimizer': 'Adam', 'checkpoint_activations': checkpoint,
        **overrides})
    return {'params': run['params'], 'loss': run['loss'], 'plan': run['plan']}


@contextlib.contextmanager
def counted(calls):
    """Count in ``calls['n']`` the checkpointed forwards run with gradients (``torch.utils.checkpoint`` calls)."""
    original = checkpointing.checkpoint

    def checkpoint(*args, **kwargs):
        calls['n'] += 1
        return original(*args, **kwargs)
    checkpointing.checkpoint = checkpoint
    try:
        yield calls
    finally:
        checkpointing.checkpoint = original


def with_and_without(run, checkpoint):
    """``run(None)`` and ``run(checkpoint)``, the second with the count of its checkpointed forwards."""
    plain = run(None)
    with counted({'n': 0}) as calls:
        checkpointed = run(checkpoint)
    return {'plain': plain, 'checkpointed': {**checkpointed, 'calls': calls['n']}}


def scenarios():
    """With and without checkpointing the body (its dropout inside), with micro-batches."""
    return with_and_without(lambda checkpoint: train(checkpoint, microbatch=3), ['body'])


def sharded(checkpoint=None):
    """``sharded_jobs.train`` ('full' sharding, micro-batches of 3) on ``network_without_batch_norm()``, with Adam."""
    from . import sharded_jobs
    run = sharded_jobs.train(7, sharding='full', microbatch=3, overrides={
        'model': network_without_batch_norm, 'optimizer': 'Adam', 'checkpoint_activations': checkpoint})
    return {'params': run['params'], 'loss': run['loss'], 'plan': run['plan']}


def sharded_scenarios():
    """Sharded ranks with and without checkpointing the body."""
    return with_and_without(sharded, ['body'])


def pipelined(checkpoint=None):
    """``pipeline_jobs``' 2 stages (1F1B, micro-batches of 2) checkpointing ``checkpoint``: the parameters each rank
    holds, the losses and the predictions."""
    from . import pipeline_jobs
    pipeline = pipeline_jobs._pipeline({**pipeline_jobs.config(2, microbatch=2), 'checkpoint_activations': checkpoint})
    pipeline.run(5, n_epochs=2, shuffle=True, seed=11)
    run = pipeline_jobs._result(pipeline, 5)
    return {'params': list(run['params'].values()), 'loss': run['loss'], 'plan': run['plan'],
            'predictions': run['predictions']}


def pipelined_scenarios():
    """2 pipeline stages with and without checkpointing every top-level child that holds parameters."""
    return with_and_without(pipelined, True)
