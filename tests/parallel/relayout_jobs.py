"""Functions the tests of resuming on another layout run in every rank (``flowpipe.parallel.launch``) and in one
process alone: a run with checkpoints stopped at a batch, then resumed on another number of ranks.

Each returns plain data: the full parameters, the losses, the items and per-item draws each rank collected.
"""
import os

import numpy as np
import torch
from torch import nn

from flowpipe import B, I, P, Checkpoint, Pipeline, R, V
from flowpipe.parallel import distributed

from .dist_jobs import N_CLASSES, N_FEATURES, dataset
from .sharded_jobs import config, full

BATCH, EPOCHS, STOP_AT = 4, 2, 5          # 23 items: 6 batches an epoch, the last of 3
#: the batch at which a run stops (set by ``train``; read by the pipeline's ``call``, outside its definition)
STOP = {'at': None}


class Stopped(Exception):
    """The failure a written run stops with."""


def _stop(number):
    if STOP['at'] is not None and number == STOP['at']:
        raise Stopped(number)


def _config(variant, sharding):
    if variant not in ('dropout', 'by_item'):
        return config(sharding)
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(N_FEATURES, 8), nn.Tanh(), nn.Dropout(0.25), nn.Linear(8, N_CLASSES)).double()
    return {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES, 'loss': 'ce',
            'optimizer': {'name': 'Adam', 'lr': 0.05},
            'randomness': 'torch' if variant == 'dropout' else 'by_item'}


def pipeline(variant='plain', sharding=None):
    """Per-item draws, the batch's items and the global loss in list variables, a training step; ``variant``:
    ``'dropout'`` adds a dropout layer drawing from torch's generators, ``'by_item'`` one drawing by item, ``'last'``
    a variable overwritten with each rank's own items."""
    template = (Pipeline()
                .init_variable('loss', [])
                .init_variable('ids', [])
                .init_variable('draws', [])
                .init_variable('last', None)
                .init_model('net', config=_config(variant, sharding))
                .call(_stop, I('c'))
                .update(V('ids', mode='a'), B.indices)
                .update(V('draws', mode='a'), P(R('uniform'))))
    if variant == 'last':
        template = template.update(V('last'), B.indices)
    return template.train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a')) << dataset()


def run_stopped(done, batch_size, folder=None, stop=None, sharded=False):
    """Run ``done`` for ``EPOCHS`` seeded, shuffled epochs with checkpoints in ``folder`` (resuming from them when
    there are some; ``sharded``: the weights in shards), stopping at batch ``stop`` (its pipeline calls ``_stop``)."""
    STOP['at'] = stop
    checkpoint = None if folder is None else Checkpoint(folder, sharded=sharded)
    try:
        done.run(batch_size, n_epochs=EPOCHS, shuffle=True, seed=11, checkpoint=checkpoint,
                 resume=folder is not None and os.path.isdir(folder) and bool(os.listdir(folder)))
    except Stopped:
        pass
    finally:
        STOP['at'] = None


def train(folder=None, stop=None, variant='plain', sharding=None, sharded=False):
    """Run ``EPOCHS`` epochs with checkpoints in ``folder`` (resuming from them when there are some), stopping at
    batch ``stop``; the state at the end (or at the stop)."""
    done = pipeline(variant, sharding)
    run_stopped(done, BATCH, folder, stop, sharded)
    model = done.m('net')
    return {'params': [full(p) for p in model.model.parameters()], 'loss': list(done.v('loss')),
            'ids': [np.asarray(ids) for ids in done.v('ids')],
            'draws': [np.asarray(draws, dtype=float) for draws in done.v('draws')],
            'world': distributed.world_size(), 'devices': [str(d) for d in model.plan.devices]}


def write_all(root):
    """On every rank: the stopped runs whose checkpoints the tests resume (plain, sharded model with shards,
    dropout under torch's generators and by item, a per-rank variable), in sub-folders of ``root``."""
    runs = {'plain': {}, 'sharded': {'sharding': 'full', 'sharded': True}, 'dropout': {'variant': 'dropout'},
            'by_item': {'variant': 'by_item'}, 'last': {'variant': 'last'}}
    return {name: train(os.path.join(root, name), STOP_AT, **kwargs) for name, kwargs in runs.items()}


def resume_all(root):
    """On every rank: resume the plain and the sharded checkpoints of ``write_all``, to the end."""
    return {'plain': train(os.path.join(root, 'plain')),
            'sharded': train(os.path.join(root, 'sharded'), sharding='full', sharded=True)}
