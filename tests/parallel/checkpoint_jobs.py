"""Networks and runs the activation checkpointing tests share, in one process and in every launched rank.

``network()`` has a stem, a body with dropout by item and by feature map and BatchNorm, and a head, in float64;
``train`` runs ``dist_jobs.train`` (a seeded, shuffled pipeline run) on it, with or without checkpointing.
"""
from collections import OrderedDict

import torch
from torch import nn

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


def scenarios():
    """With and without checkpointing the body (its dropout and BatchNorm inside), with micro-batches."""
    return {'plain': train(None, microbatch=3), 'checkpointed': train(['body'], microbatch=3)}
