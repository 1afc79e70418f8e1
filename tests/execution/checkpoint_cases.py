"""A training pipeline with augmentation draws, dropout, replicas and micro-batches, for checkpoint tests.

Also run as a script by the SIGKILL test: ``python checkpoint_cases.py FOLDER OUT [--slow]`` trains with
checkpoints in FOLDER (resuming from them when there are some) and saves the final state to OUT.
"""
import sys
import time

import numpy as np
import torch
from torch import nn

from flowpipe import B, I, R, V, Dataset, Pipeline
from flowpipe.expr import Expression

N_ITEMS, BATCH, EPOCHS = 40, 8, 3
#: the batch number at which `interrupt` raises, and the exception it raises (set by the tests)
TRIGGER = {'at': None, 'error': None, 'delay': 0.0, 'where': 'first'}


class Crash(Exception):
    """The failure the tests inject into a run."""


def interrupt(number, where):
    """Raise the configured exception at the configured batch and place (the arguments are part of the pipeline's
    definition, so the trigger itself lives outside it): ``'first'``, before any stateful action, or ``'last'``,
    after the training step."""
    if TRIGGER['delay'] and where == 'first':
        time.sleep(TRIGGER['delay'])
    if TRIGGER['at'] is not None and number == TRIGGER['at'] and where == TRIGGER['where']:
        raise TRIGGER['error']


def network(dtype=torch.float32, dropout=True):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), *([nn.Dropout(0.3)] if dropout else []),
                         nn.Linear(16, 3)).to(dtype)


def pipeline(devices=('CPU:0', 'CPU:1'), microbatch=4, dtype=torch.float32, augment=True, dropout=True, **more):
    """The pipeline: noise and a uniform draw from ``R``, a trigger, a training step saving its loss; ``more``:
    more model config items (``devices`` may be a ``C('...')`` expression)."""
    rng = np.random.default_rng(0)
    dataset = Dataset(N_ITEMS, preloaded={'x': rng.normal(size=(N_ITEMS, 6)), 'y': rng.integers(0, 3, N_ITEMS)})
    config = {'model': network(dtype, dropout), 'inputs/x/shape': (6,), 'inputs/y/classes': 3,
              'initial_block/inputs': 'x', 'loss': 'ce', 'microbatch': microbatch,
              'device': devices if isinstance(devices, (str, Expression)) else list(devices),
              'optimizer': {'name': 'Adam', 'lr': 0.01}, 'decay': {'name': 'exp', 'gamma': 0.9}, **more}
    template = (Pipeline().init_variable('loss', []).init_variable('draws', []).init_model('net', config=config)
                .call(interrupt, I('c'), 'first'))
    if augment:
        template = (template.update(B.x, B.x + R('normal', 0, 0.1, size=B.x.shape))
                    .update(V('draws', mode='a'), R('uniform')))
    template = (template.train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))
                .call(interrupt, I('c'), 'last'))
    return template << dataset


def outcome(done):
    """Parameters, optimizer and scheduler state, loss history and draws of a finished run."""
    model = done.m('net')
    result = {'parameters': [p.detach().clone() for p in model.model.parameters()],
              'optimizer': model.optimizer.state_dict(), 'iteration': model.iteration,
              'loss': done.v('loss'), 'draws': done.v('draws')}
    model.close()
    return result


def assert_same(first, second):
    assert first['loss'] == second['loss'] and first['draws'] == second['draws']
    assert first['iteration'] == second['iteration']
    assert all(torch.equal(a, b) for a, b in zip(first['parameters'], second['parameters']))
    for one, other in zip(first['optimizer']['state'].values(), second['optimizer']['state'].values()):
        assert all(torch.equal(one[key], other[key]) for key in one)


RUN = {'batch_size': BATCH, 'n_epochs': EPOCHS, 'shuffle': 5}


def run_into(folder):
    """A run with checkpoints into ``folder`` (a job of ``launch``): ``'done'``, or the error it raised."""
    try:
        pipeline(devices=('CPU',), microbatch=None).run(**RUN, checkpoint=folder)
    except Exception as error:  # noqa: BLE001 - the test reads every rank's error
        return f'{type(error).__name__}: {error}'
    return 'done'


def main(folder, out, slow):
    torch.set_num_threads(1)
    TRIGGER['delay'] = 0.3 if slow else 0.0
    done = pipeline().run(**RUN, prefetch=2, checkpoint=folder, resume=True)
    torch.save(outcome(done), out)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2], '--slow' in sys.argv)
