"""Functions the token-window tests run in one process and on every rank (``flowpipe.parallel.launch``): a seeded
run of a tiny language model on random windows of a token array, keeping each batch's windows, stopped at a batch
and resumed from its checkpoint on another world size."""
import os

import numpy as np
import torch
from torch import nn

from flowpipe import B, Checkpoint, I, Pipeline, V
from flowpipe.data import TokenWindows
from flowpipe.parallel import distributed

VOCAB, BLOCK, BATCH, ITERS, STOP_AT = 11, 6, 5, 7, 3
STOP = {'at': None}


class Stopped(Exception):
    """What a run stopped on purpose raises."""


class Bigram(nn.Module):
    """Embedding then a linear head; the logits as torch's cross entropy takes them, ``(items, classes, T)``."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(VOCAB, 4), nn.Linear(4, VOCAB)

    def forward(self, inputs):
        return self.head(torch.tanh(self.embed(inputs))).transpose(1, 2)


def tokens():
    """A token array whose windows differ from place to place."""
    return np.random.default_rng(0).integers(0, VOCAB, size=400).astype(np.uint16)


def _stop(number):
    if STOP['at'] is not None and number == STOP['at']:
        raise Stopped(number)


def pipeline(device='cpu', microbatch=None):
    config = {'model': Bigram, 'inputs/inputs/shape': (BLOCK,), 'inputs/targets/classes': VOCAB,
              'initial_block/inputs': 'inputs', 'loss': 'ce', 'optimizer': {'name': 'Adam', 'lr': 0.05},
              'device': device, 'microbatch': microbatch}
    return (Pipeline()
            .init_variable('inputs', []).init_variable('targets', [])
            .init_model('lm', config=config)
            .call(_stop, I('c'))
            .update(V('inputs', mode='a'), B.inputs).update(V('targets', mode='a'), B.targets)
            .train_model('lm', inputs=B.inputs, targets=B.targets)) << TokenWindows(tokens(), BLOCK)


def train(device='cpu', microbatch=None, prefetch=0, folder=None, stop=None):
    """The run (checkpoints in ``folder``, resumed from them when there are some, stopped at batch ``stop``)."""
    done = pipeline(device, microbatch)
    STOP['at'] = stop
    checkpoint = None if folder is None else Checkpoint(folder, trusted=True)     # it names Bigram
    try:
        done.run(BATCH, n_iters=ITERS, seed=5, prefetch=prefetch, checkpoint=checkpoint,
                 resume=folder is not None and os.path.isdir(folder) and bool(os.listdir(folder)))
    except Stopped:
        pass
    finally:
        STOP['at'] = None
    return {'params': [p.detach().cpu().numpy().copy() for p in done.m('lm').model.parameters()],
            'inputs': [np.asarray(x) for x in done.v('inputs')], 'targets': [np.asarray(y) for y in done.v('targets')],
            'world': distributed.world_size()}


def ranks_runs(root):
    """On every rank: the whole run, and one stopped at batch ``STOP_AT`` with checkpoints in ``root``."""
    return {'whole': train(), 'stopped': train(folder=os.path.join(root, 'stopped'), stop=STOP_AT)}
