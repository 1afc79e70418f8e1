"""Functions the tests of per-item ``R(...)`` rows run on every rank (``flowpipe.parallel.launch``) and in one
process: a seeded run adding noise drawn as one array for the batch (``R('normal', size=B.x.shape)``) and keeping
rows of ``R('uniform', size=(B.size, 3))``, on any layout, stopped and resumed on another world size."""
import os
import warnings

import numpy as np
import torch
from torch import nn

from flowpipe import B, I, Pipeline, R, V
from flowpipe.parallel import distributed

from .dist_jobs import N_CLASSES, N_FEATURES, dataset
from .relayout_jobs import _stop, run_stopped

BATCH, EPOCHS, STOP_AT = 5, 2, 4  # 23 items, 2 epochs: 10 batches, the last of 1 (2 ranks: 1 item, none)


def pipeline(device='cpu', microbatch=None, extra=None):
    """The noisy training run; ``extra``: one more ``R`` expression whose draws go to the variable ``extra``."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(N_FEATURES, 8), nn.Tanh(), nn.Dropout(0.2), nn.Linear(8, N_CLASSES))
    config = {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES,
              'loss': {'name': 'ce', 'reduction': 'sum'}, 'optimizer': {'name': 'SGD', 'lr': 0.01},
              'device': device, 'microbatch': microbatch, 'randomness': 'by_item'}
    template = (Pipeline()
                .init_variable('ids', []).init_variable('rows', []).init_variable('pairs', [])
                .init_variable('loss', []).init_variable('extra', [])
                .init_model('net', config=config)
                .call(_stop, I('c'))
                .update(V('ids', mode='a'), B.indices)
                .update(B.x, B.x + R('normal', 0, 0.1, size=B.x.shape))
                .update(V('rows', mode='a'), B.x)
                .update(V('pairs', mode='a'), R('uniform', size=(B.size, 3))))
    if extra is not None:
        template = template.update(V('extra', mode='a'), extra)
    return template.train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a')) << dataset()


def train(device='cpu', microbatch=None, prefetch=0, folder=None, stop=None, extra=None):
    """The run (with checkpoints in ``folder``, resumed from them when there are some, stopped at batch ``stop``);
    what it kept and the warnings it gave."""
    done = pipeline(device, microbatch, extra)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        if folder is None and stop is None:
            done.run(BATCH, n_epochs=EPOCHS, shuffle=True, seed=11, prefetch=prefetch)
        else:
            run_stopped(done, BATCH, folder, stop)
    model = done.m('net')
    return {'params': [p.detach().cpu().numpy().copy() for p in model.model.parameters()],
            'ids': [np.asarray(ids) for ids in done.v('ids')], 'rows': [np.asarray(r) for r in done.v('rows')],
            'pairs': [np.asarray(p) for p in done.v('pairs')], 'loss': list(done.v('loss')),
            'extra': [np.asarray(e) for e in done.v('extra')], 'world': distributed.world_size(),
            'warnings': [str(w.message) for w in caught if 'flowpipe: R(' in str(w.message)]}


def ranks_runs(root):
    """On every rank: the whole run, one with a draw sized from the batch but not per item, and a run stopped at
    batch ``STOP_AT`` with checkpoints in ``root``."""
    return {'whole': train(), 'doubled': train(extra=R('uniform', size=B.size * 2)),
            'stopped': train(folder=os.path.join(root, 'stopped'), stop=STOP_AT)}


def resumed(root):
    """The stopped run of ``ranks_runs`` resumed to its end."""
    return train(folder=os.path.join(root, 'stopped'))

