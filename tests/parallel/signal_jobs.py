"""Jobs for ``test_signal_stop.py``: a training run with a checkpoint on every rank, one of which sends itself a
signal in the middle of a batch."""
import os
import signal

from flowpipe import B, Checkpoint, I, Pipeline, RunStopped, V
from flowpipe.parallel import distributed

from .dist_jobs import config, dataset

#: the batch during which a rank signals itself, the rank and the signal (outside the pipeline's definition)
SEND = {'at': None, 'rank': None, 'signal': None}


def _send(number):
    if number == SEND['at'] and distributed.rank() == SEND['rank']:
        os.kill(os.getpid(), SEND['signal'])


def train(folder, at=None, rank=1, name='SIGTERM'):
    """Two shuffled epochs with ``Checkpoint(folder, every=100)``, resumed from it; rank ``rank`` sends itself
    ``name`` after batch ``at``'s training step. The parameters, losses, batches run and the exit code of the stop
    (``None``: the run ended)."""
    SEND.update(at=at, rank=rank, signal=getattr(signal, name))
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config())
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))
                .call(_send, I('c'))) << dataset()
    code = None
    try:
        pipeline.run(4, n_epochs=2, shuffle=True, seed=3, prefetch=2, checkpoint=Checkpoint(folder, every=100),
                     resume=True)
    except RunStopped as stop:
        code = stop.code
    model = pipeline.m('net')
    files = sorted(os.listdir(folder)) if distributed.rank() == 0 else None     # rank 0 writes them
    return {'params': [p.detach().numpy().copy() for p in model.model.parameters()], 'loss': list(pipeline.v('loss')),
            'batches': pipeline.state.batches, 'code': code, 'files': files}
