"""Jobs for ``test_signal_stop.py`` and ``test_signal_collectives.py``: a training run with a checkpoint on every
rank, one of which sends itself a signal in the middle of a batch; the collectives such runs take."""
import os
import signal

import torch.distributed as dist

from flowpipe import B, Checkpoint, Dataset, I, Pipeline, RunStopped, V
from flowpipe.parallel import distributed

from .dist_jobs import config, dataset

#: the batch during which a rank signals itself, the rank and the signal (outside the pipeline's definition)
SEND = {'at': None, 'rank': None, 'signal': None}
#: the collectives of torch.distributed that ``count_collectives`` counts
COLLECTIVES = ('all_reduce', 'all_gather', 'broadcast', 'gather', 'reduce', 'scatter', 'barrier', 'all_gather_object',
               'broadcast_object_list', 'gather_object', 'reduce_scatter_tensor', 'all_gather_into_tensor')


def _send(number):
    if number == SEND['at'] and distributed.rank() == SEND['rank']:
        os.kill(os.getpid(), SEND['signal'])


def _training(where='after'):
    """The training pipeline; rank ``SEND['rank']`` signals itself in batch ``SEND['at']``, ``where`` (``'before'``
    or ``'after'``) its training step."""
    pipeline = Pipeline().init_variable('loss', []).init_model('net', config=config())
    if where == 'before':
        pipeline = pipeline.call(_send, I('c'))
    pipeline = pipeline.train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))
    return (pipeline.call(_send, I('c')) if where == 'after' else pipeline) << dataset()


def train(folder, at=None, rank=1, name='SIGTERM', where='after', prefetch=2):
    """Two shuffled epochs with ``Checkpoint(folder, every=100)``, resumed from it; rank ``rank`` sends itself
    ``name`` in batch ``at``, ``where`` its training step (with ``prefetch``, a ``'before'`` runs ahead of the
    training steps, in an earlier batch's). The parameters, losses, batches run and the exit code of the stop
    (``None``: the run ended)."""
    SEND.update(at=at, rank=rank, signal=getattr(signal, name))
    pipeline = _training(where)
    code = None
    try:
        pipeline.run(4, n_epochs=2, shuffle=True, seed=3, prefetch=prefetch, checkpoint=Checkpoint(folder, every=100),
                     resume=True)
    except RunStopped as stop:
        code = stop.code
    model = pipeline.m('net')
    files = sorted(os.listdir(folder)) if distributed.rank() == 0 else None     # rank 0 writes them
    return {'params': [p.detach().numpy().copy() for p in model.model.parameters()], 'loss': list(pipeline.v('loss')),
            'batches': pipeline.state.batches, 'code': code, 'files': files}


def count_collectives(folder, trains, **checkpoint):
    """The number of each collective of ``torch.distributed`` called by a run of 2 shuffled epochs (12 batches)
    with ``Checkpoint(folder, **checkpoint)``: of the training pipeline (``trains``), or of one that only
    updates a variable. ``{name: calls}`` of those called."""
    SEND.update(at=None)
    pipeline = _training() if trains else (Pipeline().init_variable('count', 0)
                                           .update(V('count'), V('count') + 1) << Dataset(23))
    counts = dict.fromkeys(COLLECTIVES, 0)
    originals = {name: getattr(dist, name) for name in COLLECTIVES}

    def counting(name):
        def collective(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)
        return collective
    for name in COLLECTIVES:
        setattr(dist, name, counting(name))
    try:
        pipeline.run(4, n_epochs=2, shuffle=True, seed=3, checkpoint=Checkpoint(folder, **checkpoint))
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
    return {name: count for name, count in counts.items() if count}
