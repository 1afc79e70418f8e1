"""A training run with ``whole_epochs=True``, validation and a per-epoch record, run in every rank of a distributed
job and in one process alone."""
import numpy as np

from flowpipe import B, Pipeline, V
from flowpipe.callbacks import Callback, Validate
from flowpipe.parallel import distributed

from ..parallel import dist_jobs


class EpochEnds(Callback):
    """Records ``(epoch, run.step, val/loss)`` at every epoch end."""
    order = 2

    def __init__(self):
        self.ends = []

    def on_epoch_end(self, run, epoch):
        self.ends.append((epoch, run.step, run.logs.get('val/loss')))


def train(batch_size=7, n_epochs=3):
    """``dist_jobs``' network over its 23 items with whole epochs: the ids and the epoch ends this rank saw, the
    parameters and the validation losses."""
    data = dist_jobs.dataset()
    train = (Pipeline().init_variable('ids', []).init_model('net', config=dist_jobs.config())
             .update(V('ids', mode='a'), B.indices)
             .train_model('net', x=B.x, y=B.y)) << data
    val = (Pipeline().import_model('net', train).init_variable('losses', [])
           .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << data
    ends = EpochEnds()
    validate = Validate(val, batch_size=10, metrics={'loss': lambda p: float(np.mean(p.v('losses')))})
    train.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11, whole_epochs=True, callbacks=[validate, ends])
    model = train.m('net')
    return {'ids': [np.asarray(ids) for ids in train.v('ids')], 'ends': ends.ends, 'rank': distributed.rank(),
            'params': [p.detach().numpy().copy() for p in model.model.parameters()]}
