"""Functions the tests of resuming pipelined runs on another layout run in every rank (``flowpipe.parallel.launch``)
and in one process alone: a run with checkpoints stopped at a batch, then resumed with another ``'pipeline'``
(or none) on another number of processes.

Each returns plain data: the full parameters (gathered from the stages), the losses, the items and per-item draws
the rank collected.
"""
import os

import numpy as np
import torch

from flowpipe import B, I, P, Pipeline, R, V
from flowpipe.parallel import distributed

from .pipeline_jobs import N_CLASSES, N_FEATURES, dataset, network
from .relayout_jobs import _stop, run_stopped

BATCH, STOP_AT = 5, 6          # 23 items: 5 batches an epoch, the last of 3; two epochs (``relayout_jobs.EPOCHS``)


def config(stages=None, microbatch=2, dropout=False, loss='ce', amp=None, schedule=None):
    """The pipelined MLP of ``pipeline_jobs`` (five children), Adam; with ``dropout`` two ``nn.Dropout`` children
    (masks by item, the default), one on each of 2 stages (cut at ``'3'``)."""
    model = network()
    result = {'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES, 'loss': loss,
              'optimizer': {'name': 'Adam', 'lr': 0.01}, 'microbatch': microbatch, 'device': 'cpu'}
    if dropout:
        first, tanh, middle, tanh_, last = model.children()
        model = torch.nn.Sequential(first, torch.nn.Dropout(0.3), tanh, middle, tanh_, torch.nn.Dropout(0.2), last)
        if stages == 2:
            result['pipeline_split'] = ['3']
    if amp is not None:            # autocast lowers float32 only
        model, result['amp'] = model.float(), amp
    result['model'] = model
    if stages is not None:
        result['pipeline'] = stages
    if schedule is not None and stages is not None:
        result['pipeline_schedule'] = schedule
    return result


def pipeline(stages=None, microbatch=2, dropout=False, loss='ce', amp=None, schedule=None):
    """Per-item draws, the part's items and the global loss in list variables, a training step."""
    return (Pipeline()
            .init_variable('loss', [])
            .init_variable('ids', [])
            .init_variable('draws', [])
            .init_model('net', config=config(stages, microbatch, dropout, loss, amp, schedule))
            .call(_stop, I('c'))
            .update(V('ids', mode='a'), B.indices)
            .update(V('draws', mode='a'), P(R('uniform')))
            .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset()


def train(folder=None, stop=None, sharded=False, **kwargs):
    """Run ``EPOCHS`` epochs (seeded, shuffled) with checkpoints in ``folder`` (resuming from them when there are
    some; ``sharded``: their weights in shards), stopping at batch ``stop``; the state at the end (or at the stop).
    ``kwargs``: ``pipeline``'s."""
    done = pipeline(**kwargs)
    run_stopped(done, BATCH, folder, stop, sharded)
    model = done.m('net')
    state = model.engine.state_dict()           # a collective under a pipeline: rank 0 gathers every stage
    state = distributed.broadcast(state) if distributed.world_size() > 1 else state
    held = sorted(name for name, param in model.model.named_parameters() if param.device.type != 'meta')
    return {'params': {name: value.numpy().copy() for name, value in state.items()}, 'loss': list(done.v('loss')),
            'held': held,
            'ids': [np.asarray(ids) for ids in done.v('ids')],
            'draws': [np.asarray(draws, dtype=float) for draws in done.v('draws')],
            'world': distributed.world_size(), 'stages': getattr(model.plan.pipeline, 'stages', None)}


def stop_and_resume(folder, written, resumed):
    """On every rank of one job: the run of ``written`` (``train``'s keywords) stopped at ``STOP_AT``, its
    checkpoints in ``folder``; or, with ``written=None``, the run of ``resumed`` resumed from ``folder``."""
    if written is not None:
        return train(folder, STOP_AT, **written)
    return train(folder, **resumed)


def runs(jobs):
    """On every rank: ``stop_and_resume(*args)`` for each ``(name, args)`` of ``jobs``."""
    return {name: stop_and_resume(*args) for name, args in jobs}


def sharded_refused(root):
    """On every rank: the errors of a pipelined run writing sharded checkpoints, and of a DDP run's sharded
    checkpoint resumed pipelined."""
    errors = []
    for folder, stop, stages in (('pp', None, 2), ('ddp', STOP_AT, None), ('ddp', None, 2)):
        try:
            train(os.path.join(root, folder), stop, sharded=True, stages=stages)
        except ValueError as error:
            errors.append(str(error))
    return errors
